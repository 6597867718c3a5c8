"""Slurm 24.11 output recorded from the live 24.11 cluster (scripts/record-slurm-fixtures.sh into
tests/fixtures/slurm/24.11/; file names spell the command), version detection, and slurmrestd
with a JWT over HTTP.

Expected values come from what the recording script submitted: job 22 `--gres=gpu:1` finished on
onprem-1; job 23 `-p onprem --gres=gpu:4 -A gputeam -t 30` runs on onprem-2; job 24
`--gres=gpu:a100:2 -t 10` on onprem-1; job 25 `--gres=gpu:4 -A research -t 20` pends for
resources; job 26 `-p cloud --gres=gpu:2 -A gputeam` runs on cloud-aws-1 (powered up for it);
cloud-aws-2..4 are powered down."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from pathlib import Path

import pytest

from provisioner.clock import ManualClock
from provisioner.command_runner import CommandResult
from provisioner.domain.errors import SnapshotError
from provisioner.domain.jobs import JobState
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.observe.slurm.observer import (
    CliSlurmObserver,
    FallbackSlurmObserver,
    RestSlurmObserver,
    RestToken,
)
from provisioner.observe.slurm.parse import load_json, parse_jobs, parse_nodes
from provisioner.observe.slurm.version import (
    SlurmVersion,
    UnsupportedSlurmVersion,
    detect_version,
    parse_version,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "24.11"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.test-token.sig"  # a stand-in; the live cluster's never leaves it


def text(name: str) -> str:
    return (FIX / name).read_text()


def doc(name: str):
    return load_json(text(name), source=name)


MINE = {
    "22": (JobState.COMPLETED, 1, "onprem", "", None, ("onprem-1",)),
    "23": (JobState.RUNNING, 4, "onprem", "gputeam", 1800.0, ("onprem-2",)),
    "24": (JobState.RUNNING, 2, "onprem", "", 600.0, ("onprem-1",)),
    "25": (JobState.PENDING, 4, "onprem", "research", 1200.0, ()),
    "26": (JobState.RUNNING, 2, "cloud", "gputeam", None, ("cloud-aws-1",)),
}


def _mine(jobs) -> dict:
    return {
        j.job_id: (j.state, j.gpus, j.partition, j.account, j.time_limit_s, j.nodes)
        for j in jobs
        if j.job_id in MINE
    }


@pytest.mark.parametrize("name", ["squeue--json--states=all.json", "rest-v0.0.42-jobs.json"])
def test_recorded_24_11_jobs(name: str) -> None:
    jobs = parse_jobs(doc(name), source=name)
    assert _mine(jobs) == MINE
    typed = next(j for j in jobs if j.job_id == "24")
    assert typed.gpu_type == "a100"  # --gres=gpu:a100:2 -> tres_per_node "gres/gpu:a100:2"
    assert all(j.submit_ts > 1.7e9 for j in jobs)


def test_24_11_squeue_json_hides_finished_jobs_by_default() -> None:
    """Why the observer adds --states=all from 23.02 on: the finished job 22 is missing."""
    default = {j.job_id for j in parse_jobs(doc("squeue--json.json"))}
    assert default == {"23", "24", "25", "26"}


@pytest.mark.parametrize("name", ["scontrol-show-nodes--json.json", "rest-v0.0.42-nodes.json"])
def test_recorded_24_11_nodes(name: str) -> None:
    nodes = {n.name: n for n in parse_nodes(doc(name), source=name)}
    assert set(nodes) == {"onprem-1", "onprem-2", *(f"cloud-aws-{i}" for i in range(1, 5))}
    assert (nodes["onprem-1"].gpus, nodes["onprem-1"].gpus_alloc) == (4, 2)  # job 24
    assert (nodes["onprem-2"].gpus, nodes["onprem-2"].gpus_alloc) == (4, 4)  # job 23
    assert nodes["onprem-1"].state is NodeState.MIXED and nodes["onprem-1"].kind is NodeKind.ONPREM
    c1 = nodes["cloud-aws-1"]
    assert (c1.kind, c1.pool, c1.gpus, c1.gpus_alloc, c1.weight) == (
        NodeKind.BURST,
        "cloud-aws",
        8,
        2,
        100,
    )
    for i in (2, 3, 4):
        assert nodes[f"cloud-aws-{i}"].state is NodeState.POWERED_DOWN


def test_24_11_nodes_agree_between_scontrol_rest_and_scontrol_o() -> None:
    from provisioner.observe.slurm.parse import parse_scontrol_nodes

    js = {n.name: n for n in parse_nodes(doc("scontrol-show-nodes--json.json"))}
    rest = {n.name: n for n in parse_nodes(doc("rest-v0.0.42-nodes.json"))}
    text_o = {n.name: n for n in parse_scontrol_nodes(text("scontrol-o-d-show-node.txt"))}
    for name, n in js.items():
        assert (rest[name].state, rest[name].gpus_alloc) == (n.state, n.gpus_alloc)
        assert (text_o[name].state, text_o[name].gpus_alloc) == (n.state, n.gpus_alloc)
        assert rest[name].address == text_o[name].address == n.address  # NodeAddr
    # the recording's cloud-aws-1 registered from this host; the others have no address yet
    assert js["cloud-aws-1"].address == "127.0.0.1" and js["cloud-aws-2"].address == "cloud-aws-2"


def test_24_11_sinfo_json_has_no_node_list() -> None:
    """24.11's `sinfo --json` groups nodes (sinfo[].nodes.nodes names only): not a node source."""
    d = doc("sinfo--json.json")
    assert "nodes" not in d and isinstance(d["sinfo"], list)
    with pytest.raises(SnapshotError, match="no 'nodes' list"):
        parse_nodes(d)


def test_24_11_sacct_without_slurmdbd() -> None:
    assert text("sacct--json.txt").strip() == "Slurm accounting storage is disabled"


# --------------------------------------------------------------------------- versions


def test_version_detection() -> None:
    v = parse_version(text("sinfo--version.txt"))
    assert (v, v.series, v.data_parser) == (SlurmVersion(24, 11, 5), "24.11", "v0.0.42")
    assert parse_version("slurm-wlm 22.05.8").data_parser == "v0.0.38"
    assert parse_version("slurm 23.11.10").data_parser == "v0.0.40"


@pytest.mark.parametrize("printed", ["slurm-wlm 21.08.5", "slurm 25.05.1", "slurm 20.11.9"])
def test_unsupported_version_is_refused_by_name(printed: str) -> None:
    runner = Scripted({"sinfo --version": ok(printed)})
    with pytest.raises(UnsupportedSlurmVersion) as info:
        detect_version(runner)
    msg = str(info.value)
    assert f"Slurm {parse_version(printed)} is not supported" in msg
    assert "22.05, 23.02, 23.11, 24.05, 24.11" in msg and "docs/slurm.md" in msg
    with pytest.raises(UnsupportedSlurmVersion):
        CliSlurmObserver(runner, ManualClock()).observe()


def test_version_not_printed_is_a_snapshot_error() -> None:
    with pytest.raises(SnapshotError, match="no Slurm version"):
        detect_version(Scripted({"sinfo --version": ok("sinfo: command not found?")}))


# --------------------------------------------------------------------------- CLI on 24.11


def ok(out: str) -> CommandResult:
    return CommandResult(("x",), 0, out, "")


class Scripted:
    def __init__(self, answers: dict[str, CommandResult]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def run(self, argv, *, timeout_s):
        key = " ".join(argv)
        self.calls.append(key)
        return self.answers[key]


def _cli_24_11() -> Scripted:
    return Scripted(
        {
            "sinfo --version": ok(text("sinfo--version.txt")),
            "squeue --json --states=all": ok(text("squeue--json--states=all.json")),
            "scontrol show nodes --json": ok(text("scontrol-show-nodes--json.json")),
        }
    )


def test_cli_observer_on_24_11_reads_all_jobs_and_scontrol_json() -> None:
    runner = _cli_24_11()
    obs = CliSlurmObserver(runner, ManualClock())
    snap = obs.observe()
    assert obs.version == SlurmVersion(24, 11, 5)
    assert runner.calls == [
        "sinfo --version",
        "squeue --json --states=all",
        "scontrol show nodes --json",
    ]
    assert _mine(snap.jobs) == MINE and len(snap.nodes) == 6
    obs.observe()
    assert runner.calls.count("sinfo --version") == 1  # detected once, at start


# --------------------------------------------------------------------------- slurmrestd + JWT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Rest:
    """A slurmrestd stand-in on 127.0.0.1 answering the recorded v0.0.42 documents, only to
    requests that carry the expected JWT (rest_auth/jwt answers 401 otherwise)."""

    def __init__(self) -> None:
        routes = {
            "/slurm/v0.0.42/ping": text("rest-v0.0.42-ping.json"),
            "/slurm/v0.0.42/jobs": text("rest-v0.0.42-jobs.json"),
            "/slurm/v0.0.42/nodes": text("rest-v0.0.42-nodes.json"),
        }
        self.seen: list[tuple[str, str | None, str | None]] = []
        seen = self.seen

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                tok = self.headers.get("X-SLURM-USER-TOKEN")
                seen.append((self.path, tok, self.headers.get("X-SLURM-USER-NAME")))
                if tok != TOKEN:
                    code, body = 401, "Authentication failure"
                else:
                    code, body = (200, routes[self.path]) if self.path in routes else (404, "")
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.port = _free_port()
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def rest():
    r = Rest()
    yield r
    r.close()


def test_rest_observer_with_jwt_from_file_probes_the_api(rest: Rest, tmp_path: Path) -> None:
    tok = tmp_path / "jwt.token"
    tok.write_text(f"SLURM_JWT={TOKEN}\n")  # `scontrol token` output as is
    obs = RestSlurmObserver(
        None,
        ManualClock(),
        base_url=rest.url,
        token=RestToken(file=tok, user="root"),
        api_version=None,
    )
    snap = obs.observe()
    assert obs.version == SlurmVersion(24, 11, 5)
    assert _mine(snap.jobs) == MINE and len(snap.nodes) == 6
    assert [p for p, _, _ in rest.seen] == [
        "/slurm/v0.0.42/ping",
        "/slurm/v0.0.42/jobs",
        "/slurm/v0.0.42/nodes",
    ]
    assert {(t, u) for _, t, u in rest.seen} == {(TOKEN, "root")}


def test_rest_jwt_from_env_and_errors_never_show_the_token(
    rest: Rest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JWT", TOKEN)
    good = RestSlurmObserver(
        None, ManualClock(), base_url=rest.url, token=RestToken(env="SLURM_JWT"), api_version=None
    )
    assert len(good.observe().nodes) == 6
    monkeypatch.setenv("SLURM_JWT", "wrong-" + TOKEN)
    bad = RestSlurmObserver(
        None,
        ManualClock(),
        base_url=rest.url,
        token=RestToken(env="SLURM_JWT"),
        api_version="v0.0.42",
    )
    with pytest.raises(SnapshotError) as info:
        bad.observe()
    assert "HTTP 401" in str(info.value) and TOKEN not in str(info.value)
    monkeypatch.setenv("SLURM_JWT", "")
    with pytest.raises(SnapshotError, match="environment variable SLURM_JWT is empty"):
        bad.observe()


def test_fallback_reads_the_cli_when_slurmrestd_fails(tmp_path: Path) -> None:
    tok = tmp_path / "jwt.token"
    tok.write_text(TOKEN)
    down = RestSlurmObserver(
        None,
        ManualClock(),
        base_url=f"http://127.0.0.1:{_free_port()}",  # nothing listens
        token=RestToken(file=tok),
        api_version="v0.0.42",
        timeout_s=2,
    )
    obs = FallbackSlurmObserver(down, CliSlurmObserver(_cli_24_11(), ManualClock()))
    snap = obs.observe()
    assert obs.last_source == "fallback" and "ConnectError" in obs.last_primary_error
    assert _mine(snap.jobs) == MINE


def test_fallback_reports_both_errors_when_both_fail(tmp_path: Path) -> None:
    down = RestSlurmObserver(
        None,
        ManualClock(),
        base_url=f"http://127.0.0.1:{_free_port()}",
        token=RestToken(file=tmp_path / "missing.token"),
        api_version="v0.0.42",
    )
    cli = CliSlurmObserver(
        Scripted(
            {
                "sinfo --version": ok("slurm 24.11.5"),
                "squeue --json --states=all": CommandResult(
                    ("squeue",), 1, "", "Failed while looking for jobs: Unspecified error"
                ),
            }
        ),
        ManualClock(),
    )
    with pytest.raises(SnapshotError) as info:
        FallbackSlurmObserver(down, cli).observe()
    msg = str(info.value)
    assert "missing.token" in msg and "fallback:" in msg and "Unspecified error" in msg


def test_recorded_ping_names_the_release() -> None:
    meta = json.loads(text("rest-v0.0.42-ping.json"))["meta"]
    assert meta["slurm"]["release"] == "24.11.5"
    assert meta["plugin"]["data_parser"] == "data_parser/v0.0.42"
