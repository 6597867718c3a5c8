"""Helpers and fixtures for the live Slurm cluster tests (marked `slurm`): the cluster is started by
scripts/slurm-up.sh (it is always run; a cluster already up costs ~0.2 s), its env.sh loaded into
os.environ, and reset to a known state: no jobs, every burst node powered down, no pending power
requests.

`slurm_cluster` is parametrised over the Slurm releases tested live (the id is the release):
22.05 from Debian 12 on this host (SLURM_DIR, PORT_BASE) and 24.11 from Debian 13 in a
debootstrap root (SLURM24_DIR, SLURM24_PORT_BASE; its commands run through the wrappers in
SLURM_BIN_DIR, its slurmrestd speaks JWT)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from provisioner.clock import SystemClock
from provisioner.command_runner import SubprocessRunner
from provisioner.domain.errors import SnapshotError
from provisioner.domain.jobs import Job
from provisioner.domain.nodes import Node, NodeState
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm.observer import CliSlurmObserver, RestSlurmObserver, RestToken
from provisioner.register.handoff import HandoffResult, process_power_requests
from provisioner.register.power_queue import SqlitePowerRequestQueue
from provisioner.register.same_host_stand_in import SameHostCloudStandIn, SameHostSlurmdStandIn
from provisioner.register.slurm_control import SlurmControl

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def load_env_sh(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^export ([A-Z_][A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            env[m.group(1)] = m.group(2)
    return env


@dataclass
class Cluster:
    dir: Path
    env: dict[str, str]
    runner: SubprocessRunner
    control: SlurmControl
    observer: CliSlurmObserver
    launcher: SameHostSlurmdStandIn
    queue: SqlitePowerRequestQueue
    handler: SameHostCloudStandIn
    series: str = "22.05"
    rest: RestSlurmObserver | None = None
    clock: SystemClock = field(default_factory=SystemClock)
    handoffs: list[HandoffResult] = field(default_factory=list)

    @property
    def cloud_nodes(self) -> list[str]:
        return self.env["SLURM_CLOUD_NODES"].split(",")

    def now(self) -> float:
        return self.clock.now().timestamp()

    def sh(self, *argv: str, timeout: float = 20) -> str:
        res = self.runner.run(list(argv), timeout_s=timeout)
        assert res.ok, res.describe()
        return res.stdout

    def sbatch(self, *args: str, wrap: str) -> str:
        out = self.sh(
            "sbatch", "--parsable", "-o", str(self.dir / "jobs" / "%j.out"), *args, "--wrap", wrap
        )
        return out.strip().split(";")[0]

    def observe(self, timeout: float = 30) -> ClusterSnapshot:
        """A snapshot without handing off power requests (the reset uses it), retrying Slurm's
        transient errors until the deadline like `wait`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.observer.observe()
            except SnapshotError as exc:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"timed out after {timeout:g} s observing; last: Slurm error: {exc}"
                    )
            time.sleep(0.3)

    def tick(self) -> ClusterSnapshot:
        """One controller pass as the tests play it: hand queued power requests to the local
        cloud, then observe."""
        self.handoffs.append(process_power_requests(self.queue, self.handler, self.now()))
        return self.observer.observe()

    def snapshot(self) -> ClusterSnapshot:
        """One pass's snapshot, retrying Slurm's transient errors for a while (see `wait`)."""
        return self.wait("a snapshot", lambda s: s, timeout=30)

    def wait(self, what: str, pred: Callable[[ClusterSnapshot], T | None], timeout: float) -> T:
        """Poll real daemons with a deadline (the only waiting the tests do)."""
        deadline = time.monotonic() + timeout
        last = "no answer from Slurm yet"
        while True:
            try:
                snap = self.tick()
            except SnapshotError as exc:
                # slurmctld answers "Unspecified error" now and then while a node changes state
                # under load: a poll retries it; one that persists fails the test with its text
                last = f"Slurm error: {exc}"
            else:
                got = pred(snap)
                if got:
                    return got
                last = brief(snap)
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:g} s waiting for {what}; last: {last}")
            time.sleep(0.3)


def job(snap: ClusterSnapshot, job_id: str) -> Job | None:
    return next((j for j in snap.jobs if j.job_id == job_id), None)


def node(snap: ClusterSnapshot, name: str) -> Node:
    return next(n for n in snap.nodes if n.name == name)


def brief(snap: ClusterSnapshot) -> str:
    jobs = " ".join(f"{j.job_id}:{j.state}@{','.join(j.nodes)}" for j in snap.jobs)
    nodes = " ".join(f"{n.name}:{n.state}" for n in snap.nodes)
    return f"jobs[{jobs}] nodes[{nodes}]"


def _reset(c: Cluster) -> None:
    """No jobs, every burst node powered down and in service, no queued power requests."""
    ids = c.sh("squeue", "-h", "-o", "%i").split()
    if ids:
        c.runner.run(["scancel", *ids], timeout_s=20)
    for n in c.cloud_nodes:
        c.launcher.stop(n)
    snap = c.observe()
    # A CLOUD node Slurm once pinged before it had an address (one that never joined, back in
    # service) stays NOT_RESPONDING even when powered down, and Slurm then never powers it up
    # again; a forced power-down clears the flag.
    not_responding = {
        m.group(1)
        for m in re.finditer(
            r"NodeName=(\S+) .*?State=(\S+)", c.sh("scontrol", "-o", "show", "node")
        )
        if "NOT_RESPONDING" in m.group(2)
    }
    for n in snap.nodes:
        if n.name not in c.cloud_nodes:
            continue
        if n.state in (NodeState.DOWN, NodeState.DRAINED, NodeState.DRAINING):
            c.control.resume(n.name)
            c.control.force_power_down(n.name, "test reset")
        elif (
            n.state not in (NodeState.POWERED_DOWN, NodeState.POWERING_DOWN)
            or n.name in not_responding
        ):
            c.control.force_power_down(n.name, "test reset")
    c.queue.ack([r.request_id for r in c.queue.pending()], c.now())

    def settled(s: ClusterSnapshot) -> bool:
        active = [j for j in s.jobs if j.state in ("pending", "running")]
        burst = [n for n in s.nodes if n.name in c.cloud_nodes]
        return not active and all(n.state is NodeState.POWERED_DOWN for n in burst)

    c.wait("a clean cluster", settled, timeout=40)
    c.queue.ack([r.request_id for r in c.queue.pending()], c.now())
    c.handler.never_join.clear()
    c.handler.failed.clear()


SERIES = ("22.05", "24.11")


def _start(series: str) -> tuple[Path, dict[str, str]]:
    """Run scripts/slurm-up.sh for one release; its env.sh."""
    env = dict(os.environ)
    if series == "24.11":
        sdir = Path(os.environ.get("SLURM24_DIR") or REPO / ".slurm-24.11")
        env.update(SLURM_SERIES="24.11", PORT_BASE=os.environ.get("SLURM24_PORT_BASE", "6917"))
    else:
        sdir = Path(os.environ.get("SLURM_DIR") or REPO / ".slurm")
        env["SLURM_SERIES"] = "22.05"
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm-up.sh"), str(sdir)],
        capture_output=True,
        text=True,
        timeout=900,  # a fresh machine builds the 24.11 root first (~75-150 s)
        check=False,
        env=env,
    )
    if proc.returncode != 0:
        pytest.fail(f"scripts/slurm-up.sh ({series}) failed:\n{proc.stdout}\n{proc.stderr}")
    return sdir, load_env_sh(sdir / "env.sh")


def open_cluster(series: str) -> Cluster:
    """Start (or reuse) the live cluster of one release, reset; its env is put in os.environ
    (the caller restores it)."""
    sdir, env = _start(series)
    os.environ.update(env)
    bin_dir = env.get("SLURM_BIN_DIR") or None
    runner = SubprocessRunner(slurm_conf=env["SLURM_CONF"], bin_dir=bin_dir)
    control = SlurmControl(runner)
    launcher = SameHostSlurmdStandIn(
        env["SLURM_CONF"],
        sdir / "run",
        spool_dir=sdir / "state",
        **({"slurmd": str(Path(bin_dir) / "slurmd")} if bin_dir else {}),
    )
    rest = None
    if env.get("SLURMRESTD_URL"):
        token = RestToken(file=env["SLURMRESTD_TOKEN_FILE"], user=env.get("SLURMRESTD_USER"))
        rest = RestSlurmObserver(
            None, SystemClock(), base_url=env["SLURMRESTD_URL"], token=token, api_version=None
        )
    elif env.get("SLURMRESTD_SOCKET"):
        rest = RestSlurmObserver(env["SLURMRESTD_SOCKET"], SystemClock())
    cluster = Cluster(
        dir=sdir,
        env=env,
        runner=runner,
        control=control,
        observer=CliSlurmObserver(runner, SystemClock(), timeout_s=15),
        launcher=launcher,
        queue=SqlitePowerRequestQueue(env["PROVISIONER_STATE_DIR"]),
        handler=SameHostCloudStandIn(launcher, control),
        series=series,
        rest=rest,
    )
    (sdir / "jobs").mkdir(exist_ok=True)
    _reset(cluster)
    return cluster


@pytest.fixture(scope="session", params=SERIES)
def slurm_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    saved = dict(os.environ)
    try:
        cluster = open_cluster(request.param)
        yield cluster
        _reset(cluster)
    finally:  # the other release's tests must not see this cluster's env
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def cluster(slurm_cluster: Cluster) -> Iterator[Cluster]:
    yield slurm_cluster
    _reset(slurm_cluster)
