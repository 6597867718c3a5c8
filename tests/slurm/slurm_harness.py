"""Helpers and fixtures for the live Slurm cluster tests (marked `slurm`): the cluster is started by
it is always run; a cluster already up costs ~0.2 s), its env.sh loaded into os.environ, and reset
to a known state: no jobs, every burst node powered down, no pending power requests."""

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
from provisioner.domain.errors import SnapshotError
from provisioner.domain.jobs import Job
from provisioner.domain.nodes import Node, NodeState
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm import CliSlurmObserver
from provisioner.observe.slurm_runner import SubprocessRunner
from provisioner.register.handoff import HandoffResult, process_power_requests
from provisioner.register.launcher import LocalCloudHandler, LocalSlurmdLauncher
from provisioner.register.power_queue import SqlitePowerRequestQueue
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
    launcher: LocalSlurmdLauncher
    queue: SqlitePowerRequestQueue
    handler: LocalCloudHandler
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
    snap = c.observer.observe()
    for n in snap.nodes:
        if n.name not in c.cloud_nodes:
            continue
        if n.state in (NodeState.DOWN, NodeState.DRAINED, NodeState.DRAINING):
            c.control.resume(n.name)
        elif n.state not in (NodeState.POWERED_DOWN, NodeState.POWERING_DOWN):
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


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    sdir = Path(os.environ.get("SLURM_DIR") or REPO / ".slurm")
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm-up.sh"), str(sdir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"scripts/slurm-up.sh failed:\n{proc.stdout}\n{proc.stderr}")
    env = load_env_sh(sdir / "env.sh")
    os.environ.update(env)
    runner = SubprocessRunner(slurm_conf=env["SLURM_CONF"])
    control = SlurmControl(runner)
    launcher = LocalSlurmdLauncher(env["SLURM_CONF"], sdir / "run", spool_dir=sdir / "state")
    cluster = Cluster(
        dir=sdir,
        env=env,
        runner=runner,
        control=control,
        observer=CliSlurmObserver(runner, SystemClock(), timeout_s=15),
        launcher=launcher,
        queue=SqlitePowerRequestQueue(env["PROVISIONER_STATE_DIR"]),
        handler=LocalCloudHandler(launcher, control),
    )
    (sdir / "jobs").mkdir(exist_ok=True)
    _reset(cluster)
    yield cluster
    _reset(cluster)


@pytest.fixture
def cluster(slurm_cluster: Cluster) -> Iterator[Cluster]:
    yield slurm_cluster
    _reset(slurm_cluster)
