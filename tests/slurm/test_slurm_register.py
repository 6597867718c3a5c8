"""Register side without a cluster: scontrol commands, conf snippets, names, the handoff queue,
the `provisioner slurm` hooks (no PATH, blocked signals), the launcher's process handling."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from slurm_jobs_model import EVENTS, ModelJob, SlurmJobsModel

from provisioner.command_runner import CommandResult, CommandTimeout
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.naming import (
    burst_node_name,
    burst_node_names,
    hostlist_expr,
    parse_burst_node_name,
    pool_of,
)
from provisioner.domain.offers import OfferKey
from provisioner.register.handoff import process_power_requests
from provisioner.register.power_queue import PowerAction, SqlitePowerRequestQueue
from provisioner.register.same_host_stand_in import SameHostCloudStandIn, SameHostSlurmdStandIn
from provisioner.register.slurm_conf import (
    BurstNodeSet,
    capacity_feature,
    port_range,
    render_gres_conf,
    render_hook_script,
    render_power_save,
    render_slurm_conf,
)
from provisioner.register.slurm_control import SlurmControl, SlurmControlError

REPO = Path(__file__).resolve().parents[2]
PROVISIONER = Path(sys.executable).parent / "provisioner"


class RecordingRunner:
    def __init__(self, squeue_out: str = "", fail: set[str] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.squeue_out = squeue_out
        self.fail = fail or set()

    def run(self, argv, *, timeout_s):
        self.calls.append(list(argv))
        if argv[0] == "squeue":
            return CommandResult(tuple(argv), 0, self.squeue_out, "")
        if " ".join(argv) in self.fail:
            return CommandResult(tuple(argv), 1, "", "scontrol: error: Job is pending execution")
        return CommandResult(tuple(argv), 0, "", "")


# --------------------------------------------------------------------------- SlurmControl


def test_control_commands() -> None:
    r = RecordingRunner()
    c = SlurmControl(r)
    c.power_up(["cloud-aws-1", "cloud-aws-2"])
    c.drain_and_power_down("cloud-aws-1", "idle  for\n600 s")
    c.force_power_down("cloud-aws-2", "instance gone")
    c.set_address("cloud-aws-1", "10.0.0.7", "ip-10-0-0-7")
    c.resume("cloud-aws-1")
    assert r.calls == [
        ["scontrol", "update", "nodename=cloud-aws-1,cloud-aws-2", "state=power_up"],
        ["scontrol", "update", "nodename=cloud-aws-1", "state=power_down_asap",
         "reason=idle for 600 s"],
        ["scontrol", "update", "nodename=cloud-aws-2", "state=power_down_force",
         "reason=instance gone"],
        ["scontrol", "update", "nodename=cloud-aws-1", "nodeaddr=10.0.0.7",
         "nodehostname=ip-10-0-0-7"],
        ["scontrol", "update", "nodename=cloud-aws-1", "state=resume"],
    ]  # fmt: skip


RACES = [(m, e, at) for m in ("mark_failed", "handle_interruption") for e in EVENTS
         for at in range(7)]  # fmt: skip


@pytest.mark.parametrize(("method", "event", "at"), RACES)
def test_taking_a_node_away_never_loses_or_reruns_a_job(method: str, event: str, at: int) -> None:
    """Whatever the job does between the controller's commands (completes, is requeued by Slurm
    itself, fails with its node, or starts just before the drain), each job ends either
    completed exactly once or back in the queue exactly once, and every job put back is
    reported."""
    jobs = {
        "41": ModelJob("41", "RUNNING", "cloud-aws-3"),
        "42": ModelJob("42", "RUNNING", "cloud-aws-3", requeue=False),
        "43": ModelJob("43", "PENDING", None),
    }
    target = "43" if event == "start" else "41"
    model = SlurmJobsModel("cloud-aws-3", jobs, events=[(at, target, event)])
    reported = getattr(SlurmControl(model), method)("cloud-aws-3", "did not join")
    for j in jobs.values():
        assert not j.requeued_after_completion, f"job {j.job_id} was run a second time"
        assert j.state in ("COMPLETED", "PENDING"), f"job {j.job_id} lost: {j.state}"
        assert j.restarts + j.completions <= 1 or j.job_id == "43", j
        if j.restarts and j.job_id in model.on_node_at_start:
            assert j.job_id in reported, f"job {j.job_id} put back but not reported"
    assert jobs["42"].state == "PENDING" and jobs["42"].restarts == 1  # its node failed
    assert model.node_state in ("DOWN", "POWER_DOWN_FORCE")


def test_mark_failed_reports_each_job_once_and_ends_down() -> None:
    jobs = {"41": ModelJob("41", "RUNNING", "cloud-aws-3")}
    model = SlurmJobsModel("cloud-aws-3", jobs)
    assert SlurmControl(model).mark_failed("cloud-aws-3", "did not  join") == ("41",)
    assert model.node_state == "DOWN"
    assert jobs["41"].state == "PENDING" and jobs["41"].restarts == 1


def test_control_errors_are_typed() -> None:
    class Failing:
        def run(self, argv, *, timeout_s):
            if argv[1] == "update":
                return CommandResult(tuple(argv), 1, "", "slurm_update error: Invalid node name")
            raise CommandTimeout(argv, timeout_s)

    c = SlurmControl(Failing(), timeout_s=3)
    with pytest.raises(SlurmControlError, match="Invalid node name") as ei:
        c.power_up("nope")
    assert ei.value.returncode == 1
    with pytest.raises(SlurmControlError, match="timed out after 3 s"):
        c.jobs_on("x")
    with pytest.raises(ValueError, match="reason"):
        c.drain("x", "  ")
    with pytest.raises(ValueError, match="bad node names"):
        c.resume(["a b"])


# --------------------------------------------------------------------------- names and conf


def test_burst_node_names() -> None:
    assert burst_node_name("cloud-aws", 3) == "cloud-aws-3"
    assert burst_node_names("gcp-spot", 2) == ("gcp-spot-1", "gcp-spot-2")
    assert parse_burst_node_name("cloud-aws-12") == ("cloud-aws", 12)
    assert parse_burst_node_name("onprem") is None
    assert pool_of("aws-a100-spot-7") == "aws-a100-spot"
    assert hostlist_expr("cloud-aws", 4) == "cloud-aws-[1-4]"
    with pytest.raises(ValueError):
        burst_node_name("Bad_Pool", 1)
    with pytest.raises(ValueError):
        burst_node_name("cloud-aws", 0)


def test_conf_snippets() -> None:
    sets = [
        BurstNodeSet("cloud-aws", "aws", "us-east-1", "spot", 4, 8, "a100", 96, 1_100_000),
        BurstNodeSet(
            "cloud-gcp", "gcp", "europe-west4", capacity_feature("on-demand"), 2, 8, "a100",
            96, 1_300_000, weight=200,
        ),
    ]  # fmt: skip
    assert render_slurm_conf(sets).splitlines() == [
        "# burst nodes (generated by gpu-burst-provisioner)",
        "NodeName=cloud-aws-[1-4] CPUs=96 RealMemory=1100000 Gres=gpu:a100:8 "
        "Feature=cloud,aws,us-east-1,spot,a100 Weight=100 State=CLOUD",
        "NodeName=cloud-gcp-[1-2] CPUs=96 RealMemory=1300000 Gres=gpu:a100:8 "
        "Feature=cloud,gcp,europe-west4,ondemand,a100 Weight=200 State=CLOUD",
        "PartitionName=cloud Nodes=cloud-aws-[1-4],cloud-gcp-[1-2] MaxTime=INFINITE State=UP",
    ]
    assert "NodeName=cloud-gcp-[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-7]" in (
        render_gres_conf(sets)
    )
    with pytest.raises(ValueError, match="higher than on-prem"):
        render_slurm_conf(sets, onprem_weight=150)
    with pytest.raises(ValueError, match="capacity"):
        capacity_feature("reserved")
    ps = render_power_save(hook_dir="/etc/slurm/burst", resume_timeout_s=900)
    assert "ResumeProgram=/etc/slurm/burst/resume.sh" in ps and "ResumeTimeout=900" in ps
    # the controller sets NodeAddr: slurmctld must not take it from whoever registers
    assert "SlurmctldParameters=enable_configless,idle_on_node_suspend\n" in ps
    stand_in = render_power_save(hook_dir="/h", node_address="registration")
    assert "SlurmctldParameters=enable_configless,idle_on_node_suspend,cloud_reg_addrs" in stand_in
    with pytest.raises(ValueError, match="node_address"):
        render_power_save(hook_dir="/h", node_address="dhcp")
    # srun's ports, the ones a firewall between burst nodes and submit hosts must pass
    assert "SrunPortRange=60001-63000\n" in ps
    assert "SrunPortRange=61000-61999\n" in render_power_save(
        hook_dir="/h", srun_ports=port_range("61000-61999")
    )
    for bad in ("61000", "6000-5000", "80-90", "60001-70000"):
        with pytest.raises(ValueError, match="port range"):
            port_range(bad)
    hook = render_hook_script("resume-fail", provisioner="/opt/p/bin/provisioner", state_dir="/s")
    assert 'exec /opt/p/bin/provisioner slurm resume-fail --state-dir /s "$1"' in hook


# --------------------------------------------------------------------------- handoff queue


def test_queue_is_idempotent_and_durable(tmp_path: Path) -> None:
    q = SqlitePowerRequestQueue(tmp_path)
    assert q.submit(PowerAction.RESUME, ["n-1", "n-2"], 10.0, "n-[1-2]") == 2
    assert q.submit(PowerAction.RESUME, ["n-2", "n-3"], 11.0) == 1  # Slurm called twice
    assert q.submit(PowerAction.SUSPEND, ["n-1"], 12.0) == 1  # another action is another request
    again = SqlitePowerRequestQueue(tmp_path)  # a new process sees the same requests
    pend = again.pending()
    assert [(r.action, r.node) for r in pend] == [
        (PowerAction.RESUME, "n-1"),
        (PowerAction.RESUME, "n-2"),
        (PowerAction.RESUME, "n-3"),
        (PowerAction.SUSPEND, "n-1"),
    ]
    again.ack([pend[0].request_id], 20.0)
    assert q.submit(PowerAction.RESUME, ["n-1"], 30.0) == 1  # handled before: a new request
    with sqlite3.connect(q.path) as db:
        assert db.execute("select count(*) from power_requests").fetchone() == (5,)


def test_queue_concurrent_submitters(tmp_path: Path) -> None:
    q = SqlitePowerRequestQueue(tmp_path)
    errors: list[BaseException] = []

    def hook(i: int) -> None:
        try:
            SqlitePowerRequestQueue(tmp_path).submit(PowerAction.RESUME, [f"n-{i % 5}"], i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hook, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r.node for r in q.pending()) == [f"n-{i}" for i in range(5)]


class Handler:
    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.fail_on = fail_on

    def _rec(self, verb: str, nodes) -> None:
        if self.fail_on in nodes:
            raise RuntimeError("cloud said no")
        self.calls.append((verb, tuple(nodes)))

    def resume(self, nodes):
        self._rec("resume", nodes)

    def suspend(self, nodes):
        self._rec("suspend", nodes)

    def resume_failed(self, nodes):
        self._rec("resume_failed", nodes)


def test_process_power_requests_acks_only_what_was_handled(tmp_path: Path) -> None:
    q = SqlitePowerRequestQueue(tmp_path)
    q.submit(PowerAction.RESUME, ["a-1", "a-2"], 1.0)
    q.submit(PowerAction.SUSPEND, ["a-3"], 2.0)
    q.submit(PowerAction.RESUME_FAIL, ["a-4"], 3.0)
    h = Handler(fail_on="a-2")
    res = process_power_requests(q, h, now_ts=5.0)
    assert h.calls == [("resume", ("a-1",)), ("suspend", ("a-3",)), ("resume_failed", ("a-4",))]
    assert [r.node for r in res.handled] == ["a-1", "a-3", "a-4"]
    assert [(r.node, msg) for r, msg in res.failed] == [("a-2", "RuntimeError: cloud said no")]
    assert [r.node for r in q.pending()] == ["a-2"]  # retried next pass
    h.fail_on = ""
    process_power_requests(q, h, now_ts=6.0)
    assert q.pending() == ()


# --------------------------------------------------------------------------- the hook command


def _block_signals() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def test_hook_works_with_no_path_and_blocked_signals(tmp_path: Path) -> None:
    """As slurmscriptd runs it: empty environment, most signals blocked; called twice."""
    argv = [str(PROVISIONER), "slurm", "resume", "--state-dir", str(tmp_path), "cloud-aws-[1-3,5]"]
    for _ in range(2):
        proc = subprocess.run(
            argv, env={}, preexec_fn=_block_signals, capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    nodes = [r.node for r in SqlitePowerRequestQueue(tmp_path).pending()]
    assert nodes == ["cloud-aws-1", "cloud-aws-2", "cloud-aws-3", "cloud-aws-5"]
    proc = subprocess.run(
        [str(PROVISIONER), "slurm", "suspend", "cloud-aws-1"],
        env={"PROVISIONER_STATE_DIR": str(tmp_path)}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bad = subprocess.run(
        [str(PROVISIONER), "slurm", "resume-fail", "--state-dir", str(tmp_path), "x[1-"],
        env={}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "hostlist" in bad.stderr
    assert len(SqlitePowerRequestQueue(tmp_path).pending()) == 5


# --------------------------------------------------------------------------- launcher


def _fake_slurmd(tmp_path: Path) -> Path:
    """A stand-in with slurmd's basename: writes its pid file like slurmd and stays up."""
    script = tmp_path / "bin" / "slurmd"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/bash\n"
        '# args: -b -f CONF -N NODE\nnode="$5"\n'
        f"exec -a slurmd /bin/bash -c 'echo $$ > {tmp_path}/run/slurmd-$0.pid; exec sleep 60' "
        '"$node" </dev/null >/dev/null 2>&1 &\n'
    )
    script.chmod(0o755)
    (tmp_path / "run").mkdir()
    return script


def test_launcher_starts_once_and_stops_by_pid_file(tmp_path: Path) -> None:
    fake = _fake_slurmd(tmp_path)
    launcher = SameHostSlurmdStandIn(tmp_path / "slurm.conf", tmp_path / "run", slurmd=str(fake))
    launcher._pid = _pid_any(launcher)  # type: ignore[method-assign]
    assert launcher.start("cloud-aws-1") is True
    _wait_for(lambda: launcher.running("cloud-aws-1"))
    assert launcher.start("cloud-aws-1") is False  # idempotent
    pid = int((tmp_path / "run" / "slurmd-cloud-aws-1.pid").read_text())
    assert launcher.stop("cloud-aws-1") is True
    _wait_for(lambda: not launcher.running("cloud-aws-1"))
    assert launcher.stop("cloud-aws-1") is False
    with pytest.raises(ProcessLookupError):
        _reap(pid)


def _pid_any(launcher: SameHostSlurmdStandIn):
    """The fake is `sleep`, not `slurmd`: accept any live pid from the pid file."""
    from provisioner.register import same_host_stand_in as mod

    def pid(node: str) -> int | None:
        try:
            p = int(launcher.pid_file(node).read_text())
        except (OSError, ValueError):
            return None
        return p if mod._alive(p) else None

    return pid


def _wait_for(pred, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _reap(pid: int) -> None:
    from provisioner.register.same_host_stand_in import _alive

    if not _alive(pid):
        raise ProcessLookupError(pid)


def test_launcher_refuses_a_pid_that_is_not_that_nodes_slurmd(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "slurmd-n-1.pid").write_text(str(os.getpid()))  # pytest, not slurmd
    launcher = SameHostSlurmdStandIn(tmp_path / "slurm.conf", tmp_path / "run")
    assert not launcher.running("n-1")
    assert launcher.stop("n-1") is False  # never signals a stranger


def test_launcher_sync_follows_instance_states(tmp_path: Path) -> None:
    class Spy(SameHostSlurmdStandIn):
        def __init__(self) -> None:
            super().__init__("c", tmp_path)
            self.up: set[str] = {"n-3"}

        def start(self, node: str) -> bool:
            new = node not in self.up
            self.up.add(node)
            return new

        def stop(self, node: str) -> bool:
            was = node in self.up
            self.up.discard(node)
            return was

    def inst(i: int, state: InstanceState, node: str) -> CloudInstance:
        key = OfferKey.parse("aws/us-east-1/p4d.24xlarge/spot")
        return CloudInstance(f"i-{i}", "cloud-aws", key, "A100", 8, 0, state, 0.0, node_name=node)

    spy = Spy()
    started, stopped = spy.sync(
        [
            inst(1, InstanceState.REQUESTED, "n-1"),
            inst(2, InstanceState.JOINING, "n-2"),
            inst(3, InstanceState.TERMINATED, "n-3"),
            inst(4, InstanceState.READY, ""),
        ]
    )
    assert (started, stopped, spy.up) == (["n-2"], ["n-3"], {"n-2"})


def test_local_cloud_handler(tmp_path: Path) -> None:
    events: list[str] = []

    class L:
        def start(self, n):
            events.append(f"start {n}")

        def stop(self, n):
            events.append(f"stop {n}")

    class C:
        def mark_failed(self, nodes, reason):
            events.append(f"failed {nodes[0]}: {reason}")
            return ("7",)

    h = SameHostCloudStandIn(L(), C(), never_join={"n-2"})  # type: ignore[arg-type]
    h.resume(["n-1", "n-2"])
    h.suspend(["n-1"])
    h.resume_failed(["n-2"])
    assert events == [
        "start n-1",
        "stop n-1",
        "stop n-2",
        "failed n-2: burst node did not join (ResumeTimeout)",
    ]
    assert h.failed == [("n-2", ("7",))]
