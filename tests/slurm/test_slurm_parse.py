"""Parsing Slurm's output into domain objects: real 22.05 samples, newer shapes, bad input."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
from pathlib import Path

import pytest

from provisioner.clock import ManualClock
from provisioner.command_runner import CommandResult, CommandTimeout
from provisioner.domain.errors import SnapshotError
from provisioner.domain.hostlist import HostlistError, expand_hostlist
from provisioner.domain.jobs import JobState
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm.observer import CliSlurmObserver, RestSlurmObserver, observe_or_stale
from provisioner.observe.slurm.parse import (
    load_json,
    map_node_state,
    parse_gres,
    parse_jobs,
    parse_nodes,
    parse_scontrol_nodes,
    parse_snapshot,
    parse_tres_gpus,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def text(name: str) -> str:
    return (FIX / name).read_text()


# --------------------------------------------------------------------------- hostlists


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("cloud-aws-[1-3,5]", ("cloud-aws-1", "cloud-aws-2", "cloud-aws-3", "cloud-aws-5")),
        ("onprem-1", ("onprem-1",)),
        ("a,b[7-8]", ("a", "b7", "b8")),
        ("n[01-03]", ("n01", "n02", "n03")),
        ("r[1-2]-g[1-2]", ("r1-g1", "r1-g2", "r2-g1", "r2-g2")),
        ("x[1-2],x2", ("x1", "x2")),
        ("", ()),
        ("(null)", ()),
    ],
)
def test_expand_hostlist(expr: str, hosts: tuple[str, ...]) -> None:
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize("bad", ["x[1-", "x]1[", "x[3-1]", "x[a-b]", "x[[1]]", "a b"])
def test_bad_hostlist(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand_hostlist(bad)


# --------------------------------------------------------------------------- small values


@pytest.mark.parametrize(
    ("spec", "gpus", "gtype"),
    [
        ("gres:gpu:2", 2, ""),  # 22.05
        ("gres/gpu:2", 2, ""),  # 23.x
        ("gres:gpu:a100:2", 2, "a100"),
        ("gres/gpu:a100:4", 4, "a100"),
        ("gres/gpu=3", 3, ""),
        ("cpu=1,mem=1000M,node=1,billing=1,gres/gpu=4", 4, ""),
        ("gres/gpu=2,gres/gpu:a100=2", 2, "a100"),
        ("gres:shard:2", 0, ""),
        ("cpu=1,node=1", 0, ""),
        ("", 0, ""),
    ],
)
def test_tres_gpus(spec: str, gpus: int, gtype: str) -> None:
    assert parse_tres_gpus(spec) == (gpus, gtype)


def test_gres_strings() -> None:
    assert [(g.name, g.type, g.count) for g in parse_gres("gpu:a100:4(IDX:0-3)")] == [
        ("gpu", "a100", 4)
    ]
    assert parse_gres("gpu:a100:0(IDX:N/A)")[0].count == 0
    items = parse_gres("gpu:a100:2(IDX:0,2),gpu:v100:1(IDX:1)")
    assert [(g.type, g.count) for g in items] == [("a100", 2), ("v100", 1)]
    assert parse_gres("gpu:8")[0].count == 8
    assert parse_gres("(null)") == ()
    with pytest.raises(SnapshotError, match="count"):
        parse_gres("gpu:a100:many")


@pytest.mark.parametrize(
    ("words", "state"),
    [
        ({"idle"}, NodeState.IDLE),
        ({"IDLE", "CLOUD", "POWERED_DOWN"}, NodeState.POWERED_DOWN),
        ({"MIXED", "CLOUD", "POWERING_UP"}, NodeState.POWERING_UP),
        ({"IDLE", "CLOUD", "POWERING_DOWN"}, NodeState.POWERING_DOWN),
        ({"MIXED", "DRAIN", "POWER_DOWN"}, NodeState.DRAINING),  # power_down_asap, job running
        ({"IDLE", "DRAIN", "POWER_DOWN"}, NodeState.POWERING_DOWN),
        ({"ALLOCATED", "DRAIN"}, NodeState.DRAINING),
        ({"IDLE", "DRAIN"}, NodeState.DRAINED),
        ({"DOWN", "CLOUD", "POWERED_DOWN"}, NodeState.DOWN),  # ResumeTimeout reached
        ({"IDLE", "NOT_RESPONDING"}, NodeState.DOWN),
        ({"allocated"}, NodeState.ALLOCATED),
        ({"mixed", "COMPLETING"}, NodeState.MIXED),
        ({"weird"}, NodeState.UNKNOWN),
    ],
)
def test_node_states(words: set[str], state: NodeState) -> None:
    assert map_node_state(words) is state


# --------------------------------------------------------------------------- real 22.05 samples


def test_squeue_sample_22_05() -> None:
    jobs = parse_jobs(load_json(text("squeue.json"), source="squeue.json"))
    assert len(jobs) == 6
    running = [j for j in jobs if j.state is JobState.RUNNING]
    pending = [j for j in jobs if j.state is JobState.PENDING]
    assert len(running) == 4 and len(pending) == 2
    j1 = jobs[0]
    assert (j1.job_id, j1.gpus, j1.partition, j1.nodes) == ("1", 2, "onprem", ("onprem-1",))
    assert j1.user == "root" and j1.start_ts == 1796020475.0 and j1.end_ts is None
    assert j1.time_limit_s is None  # null: no limit (partition MaxTime=INFINITE)
    assert all(j.gpus == 2 for j in jobs)
    assert pending[0].nodes == () and pending[0].start_ts is None


def test_rest_jobs_sample_states() -> None:
    jobs = {j.job_id: j for j in parse_jobs(load_json(text("rest-jobs.json"), source="rest"))}
    assert jobs["14"].state is JobState.COMPLETED and jobs["14"].end_ts == 1796021553.0
    assert jobs["16"].state is JobState.CANCELLED
    assert jobs["22"].state is JobState.RUNNING  # CONFIGURING holds its burst node
    assert jobs["22"].configuring  # ... and has not started on it yet
    assert not jobs["14"].configuring
    assert jobs["22"].gpus == 8 and jobs["22"].nodes == ("cloud-aws-1",)


def test_sinfo_sample_22_05() -> None:
    nodes = {n.name: n for n in parse_nodes(load_json(text("sinfo.json"), source="sinfo"))}
    assert set(nodes) == {f"cloud-aws-{i}" for i in range(1, 5)} | {"onprem-1", "onprem-2"}
    c1 = nodes["cloud-aws-1"]
    assert c1.kind is NodeKind.BURST and c1.state is NodeState.POWERED_DOWN
    assert (c1.gpus, c1.gpus_alloc, c1.gpu_type) == (8, 0, "a100")
    assert c1.features == ("cloud", "aws") and c1.pool == "cloud-aws"
    o1 = nodes["onprem-1"]
    assert o1.kind is NodeKind.ONPREM and o1.state is NodeState.ALLOCATED
    assert (o1.gpus, o1.gpus_alloc) == (4, 4) and o1.partitions == ("onprem",)
    assert o1.pool == ""


def test_rest_nodes_sample_22_05() -> None:
    nodes = {n.name: n for n in parse_nodes(load_json(text("rest-nodes.json"), source="rest"))}
    assert nodes["cloud-aws-1"].state is NodeState.MIXED
    assert nodes["cloud-aws-1"].gpus_alloc == 8


def test_node_addresses_are_read_from_every_22_05_source() -> None:
    # NodeAddr as the recordings hold it: the node's own name until something set it
    text_o = {n.name: n.address for n in parse_scontrol_nodes(text("scontrol-o-show-nodes.txt"))}
    sinfo = {n.name: n.address for n in parse_nodes(load_json(text("sinfo.json"), source="s"))}
    rest = {n.name: n.address for n in parse_nodes(load_json(text("rest-nodes.json"), source="r"))}
    assert text_o["cloud-aws-1"] == sinfo["cloud-aws-1"] == "cloud-aws-1"
    assert rest["cloud-aws-1"] == "127.0.0.1" and rest["cloud-aws-2"] == "cloud-aws-2"
    assert text_o["onprem-1"] == "127.0.0.1"


def test_scontrol_sample_22_05() -> None:
    nodes = {n.name: n for n in parse_scontrol_nodes(text("scontrol-o-show-nodes.txt"))}
    assert len(nodes) == 6
    assert nodes["cloud-aws-3"].state is NodeState.POWERED_DOWN
    assert nodes["cloud-aws-3"].kind is NodeKind.BURST
    assert nodes["onprem-1"].state is NodeState.IDLE and nodes["onprem-1"].gpus == 4
    assert nodes["onprem-1"].idle_since_ts is not None
    assert nodes["onprem-2"].partitions == ("onprem",)


def test_scontrol_gres_used_and_reason_with_spaces() -> None:
    line = (
        "NodeName=cloud-aws-2 Arch=x86_64 AvailableFeatures=cloud,aws ActiveFeatures=cloud,aws "
        "Gres=gpu:a100:8 GresUsed=gpu:a100:6(IDX:0-5) State=MIXED+DRAIN+CLOUD+POWER_DOWN "
        "Weight=100 Partitions=cloud Reason=scale in by burst-ctl [root@2026-11-30T07:00:00]"
    )
    (n,) = parse_scontrol_nodes(line)
    assert (n.gpus, n.gpus_alloc, n.state, n.weight) == (8, 6, NodeState.DRAINING, 100)
    assert n.reason == "scale in by burst-ctl"  # Slurm's words, without who and when
    with pytest.raises(SnapshotError, match="no NodeName"):
        parse_scontrol_nodes("Foo=bar State=IDLE")


def test_snapshot_from_samples() -> None:
    snap = parse_snapshot(text("squeue.json"), text("sinfo.json"), taken_ts=1796020500.0)
    assert not snap.stale and snap.taken_ts == 1796020500.0
    assert len(snap.pending) == 2 and len(snap.running) == 4
    assert len(snap.nodes_of(NodeKind.BURST)) == 4 and len(snap.nodes_of(NodeKind.ONPREM)) == 2


# --------------------------------------------------------------------------- newer releases


def test_squeue_23x_shapes() -> None:
    jobs = {j.job_id: j for j in parse_jobs(load_json(text("squeue-23x-shapes.json"), source="x"))}
    j = jobs["101"]
    assert (j.state, j.gpus, j.gpu_type, j.nodes) == (
        JobState.RUNNING,
        8,
        "a100",
        ("onprem-1", "onprem-2"),
    )
    assert j.time_limit_s == 7200.0 and j.account == "gputeam" and j.qos == "normal"
    p = jobs["102"]
    assert p.state is JobState.PENDING and p.gpus == 8 and p.time_limit_s is None
    assert p.partitions == ("onprem", "cloud")
    assert jobs["103"].state is JobState.RUNNING and jobs["103"].configuring
    assert not jobs["101"].configuring
    assert jobs["104"].gpus == 3  # tres_per_task x tasks


def test_sinfo_23x_shapes() -> None:
    nodes = {n.name: n for n in parse_nodes(load_json(text("sinfo-23x-shapes.json"), source="x"))}
    assert nodes["onprem-1"].state is NodeState.MIXED and nodes["onprem-1"].gpus_alloc == 2
    assert nodes["onprem-1"].kind is NodeKind.ONPREM
    assert nodes["cloud-aws-1"].state is NodeState.POWERING_UP
    assert nodes["cloud-aws-1"].features == ("cloud", "aws", "us-east-1", "spot")
    assert nodes["cloud-aws-1"].weight == 100
    assert nodes["cloud-aws-2"].state is NodeState.POWERED_DOWN
    assert nodes["cloud-aws-2"].kind is NodeKind.BURST  # CLOUD flag, no active features
    assert nodes["cloud-aws-3"].state is NodeState.DOWN


def test_node_listed_once_per_partition_is_merged() -> None:
    doc = json.loads(text("sinfo.json"))
    extra = dict(doc["nodes"][4], partitions=["debug"])
    doc["nodes"].append(extra)
    nodes = {n.name: n for n in parse_nodes(doc)}
    assert nodes["onprem-1"].partitions == ("onprem", "debug")


# --------------------------------------------------------------------------- malformed


def test_truncated_json_names_the_source() -> None:
    body = text("squeue.json")
    with pytest.raises(SnapshotError, match=r"squeue --json: malformed JSON at line \d+"):
        parse_snapshot(body[: len(body) // 2], text("sinfo.json"), 0.0)


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ("", "empty output"),
        ("[]", "expected a JSON object"),
        ('{"meta": {}}', "no 'jobs' list"),
        (
            '{"errors": [{"error": "Unable to contact slurm controller"}], "jobs": []}',
            "Unable to contact",
        ),
        ('{"jobs": [{"job_state": "PENDING"}]}', r"jobs\[0\]: job record without job_id"),
        ('{"jobs": [{"job_id": 7, "job_state": "PENDING"}]}', "job 7: submit_time missing"),
        ('{"jobs": [{"job_id": 7, "job_state": "BOGUS", "submit_time": 1}]}', "unknown job_state"),
        (
            '{"jobs": [{"job_id": 7, "job_state": "RUNNING", "submit_time": 1, "nodes": "a[1-"}]}',
            "job 7: nodes",
        ),
        (
            '{"jobs": [{"job_id": 7, "job_state": "PENDING", "submit_time": "soon"}]}',
            "expected a number",
        ),
    ],
)
def test_malformed_squeue(doc: str, match: str) -> None:
    with pytest.raises(SnapshotError, match=match):
        parse_jobs(load_json(doc, source="squeue --json"))


def test_malformed_sinfo() -> None:
    with pytest.raises(SnapshotError, match=r"nodes\[0\]: node record without a name"):
        parse_nodes({"nodes": [{"state": "idle"}]})
    with pytest.raises(SnapshotError, match="node x: state missing"):
        parse_nodes({"nodes": [{"name": "x"}]})


# --------------------------------------------------------------------------- CLI observer


class ScriptedRunner:
    """Answers commands from a table; records what was run."""

    def __init__(self, answers: dict[str, CommandResult | Exception]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def run(self, argv, *, timeout_s):
        self.calls.append((tuple(argv), timeout_s))
        if list(argv[1:]) == ["--version"] and " ".join(argv) not in self.answers:
            return ok(argv[0], "slurm-wlm 22.05.8\n")  # what Debian 12's sinfo prints
        ans = self.answers.get(" ".join(argv)) or self.answers[argv[0]]
        if isinstance(ans, Exception):
            raise ans
        return ans


def ok(argv: str, out: str) -> CommandResult:
    return CommandResult((argv,), 0, out, "")


def test_cli_observer_reads_both_commands_with_timeout() -> None:
    clock = ManualClock()
    runner = ScriptedRunner(
        {"squeue": ok("squeue", text("squeue.json")), "sinfo": ok("sinfo", text("sinfo.json"))}
    )
    snap = CliSlurmObserver(runner, clock, timeout_s=7).observe()
    assert snap.taken_ts == clock.now().timestamp() and not snap.stale
    assert [c[0] for c in runner.calls] == [
        ("sinfo", "--version"),
        ("squeue", "--json"),
        ("sinfo", "--json"),
    ]
    assert all(t == 7 for _, t in runner.calls)


def test_cli_observer_falls_back_to_scontrol() -> None:
    runner = ScriptedRunner(
        {
            "squeue": ok("squeue", text("squeue.json")),
            "sinfo": CommandResult(("sinfo",), 1, "", "sinfo: unrecognized option '--json'"),
            "scontrol": ok("scontrol", text("scontrol-o-show-nodes.txt")),
        }
    )
    snap = CliSlurmObserver(runner, ManualClock()).observe()
    assert len(snap.nodes) == 6
    assert runner.calls[-1][0] == ("scontrol", "-o", "-d", "show", "node")


def test_observe_or_stale_on_timeout_keeps_previous() -> None:
    clock = ManualClock()
    good = ScriptedRunner(
        {"squeue": ok("squeue", text("squeue.json")), "sinfo": ok("sinfo", text("sinfo.json"))}
    )
    first = observe_or_stale(CliSlurmObserver(good, clock), previous=None, now_ts=1.0)
    assert not first.stale
    clock.advance(30)
    hung = ScriptedRunner({"squeue": CommandTimeout(["squeue", "--json"], 15)})
    second = observe_or_stale(CliSlurmObserver(hung, clock), previous=first, now_ts=31.0)
    assert second.stale and second.jobs == first.jobs
    assert second.stale_reasons == ("slurm: `squeue --json` timed out after 15 s",)
    third = observe_or_stale(CliSlurmObserver(hung, clock), previous=second, now_ts=61.0)
    assert len(third.stale_reasons) == 1  # reasons do not pile up


def test_observe_or_stale_on_garbage_and_missing_binary() -> None:
    garbage = ScriptedRunner({"squeue": ok("squeue", '{"jobs": [')})
    snap = observe_or_stale(CliSlurmObserver(garbage, ManualClock()), previous=None, now_ts=5.0)
    assert isinstance(snap, ClusterSnapshot) and snap.stale and snap.jobs == ()
    assert "malformed JSON" in snap.stale_reasons[0]
    missing = ScriptedRunner({"squeue": FileNotFoundError(2, "No such file", "squeue")})
    snap = observe_or_stale(CliSlurmObserver(missing, ManualClock()), previous=None, now_ts=5.0)
    assert snap.stale and "could not run" in snap.stale_reasons[0]
    failing = ScriptedRunner(
        {"squeue": CommandResult(("squeue",), 1, "", "slurm_load_jobs error: Unable to contact")}
    )
    snap = observe_or_stale(CliSlurmObserver(failing, ManualClock()), previous=None, now_ts=5.0)
    assert "exited 1: slurm_load_jobs error" in snap.stale_reasons[0]


# --------------------------------------------------------------------------- REST observer


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def _serve(sock: Path, routes: dict[str, tuple[int, str]]) -> _UnixHTTPServer:
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code, body = routes.get(self.path, (404, "not found"))
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def address_string(self) -> str:
            return "unix"

        def log_message(self, *args: object) -> None:
            pass

    srv = _UnixHTTPServer(str(sock), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_rest_observer_over_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "slurmrestd.sock"
    srv = _serve(
        sock,
        {
            "/slurm/v0.0.38/jobs": (200, text("rest-jobs.json")),
            "/slurm/v0.0.38/nodes": (200, text("rest-nodes.json")),
        },
    )
    try:
        snap = RestSlurmObserver(str(sock), ManualClock()).observe()
        assert len(snap.jobs) == 9 and len(snap.nodes) == 6 and not snap.stale
        bad = RestSlurmObserver(str(sock), ManualClock(), api_version="v0.0.99")
        stale = observe_or_stale(bad, previous=snap, now_ts=9.0)
        assert stale.stale and "HTTP 404" in stale.stale_reasons[0]
    finally:
        srv.shutdown()
        srv.server_close()
    gone = observe_or_stale(
        RestSlurmObserver(str(sock), ManualClock(), timeout_s=2), previous=None, now_ts=1.0
    )
    assert gone.stale and "slurmrestd GET /slurm/v0.0.38/jobs" in gone.stale_reasons[0]
