"""A FAKE Slurm cluster, in memory, for the demo (`provisioner demo`) and the crash-safety tests.

This is not Slurm. It is a small, honest stand-in that implements the same ports the controller
uses on a real cluster, with Slurm's power-saving semantics as far as the controller can see them:

* `observe()` (the `SlurmObserver` port): jobs and nodes as a `ClusterSnapshot`, node states as
  `sinfo` shows them (`idle~` powered down, `idle#`/`alloc#` powering up, `idle%` powering down,
  `drng`, `down`), finished jobs listed for `min_job_age_s` (Slurm's MinJobAge);
* `drain_and_power_down` / `force_power_down` / `mark_failed` / `resume` (the `NodeControl`
  slice of `SlurmControl`) and `set_partitions` (`JobControl`: `scontrol update partition=`);
* `sync(instances)` (`NodeLauncher`): plays the cloud VM boot. A bound, running instance makes
  its node register `boot_s` later; an instance going away takes its node with it.

Scheduling is deliberately simple: jobs are single-node (at most one node's GPUs), placed in
submit order wherever they fit now (backfill without reservations), on-prem nodes (lower Weight)
first. A job whose partitions include a burst partition may be placed on a powered-up burst node,
on one still powering up, or on a powered-down one, which Slurm then powers up (as ResumeProgram
would) and which stays `POWERING_UP` until a launcher boots it or `resume_timeout_s` passes
(then it goes DOWN and its jobs requeue). Slurm resets a job's start time when its node boots;
so does the fake. Time is the injected clock's: the fake advances to `clock.now()` event by event
on every `observe()`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from provisioner.clock import Clock
from provisioner.domain.errors import InvalidArgument
from provisioner.domain.gpu_share import MigDevices, NodeShares, ShareRequest
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.naming import burst_node_name
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.snapshot import ClusterSnapshot

Power = Literal["on", "off", "booting", "stopping", "down"]
_UP = frozenset({InstanceState.ALLOCATED, InstanceState.JOINING, InstanceState.READY})
_GONE = frozenset({InstanceState.TERMINATING, InstanceState.TERMINATED, InstanceState.FAILED})


@dataclass
class FakeJob:
    job_id: str
    gpus: int
    submit_ts: float
    duration_s: float
    partition: str = "onprem"
    account: str = ""
    user: str = ""
    time_limit_s: float | None = None
    name: str = ""
    state: JobState = JobState.PENDING
    start_ts: float | None = None
    end_ts: float | None = None
    node: str = ""
    ran_in: str = ""
    completions: int = 0  # the chaos soak checks each job completes exactly once
    share: ShareRequest | None = None  # MIG devices instead of whole GPUs (then gpus is 0)


@dataclass
class FakeNode:
    name: str
    kind: NodeKind
    gpus: int
    partition: str
    gpu_type: str = "a100"
    features: tuple[str, ...] = ()
    weight: int = 1
    pool: str = ""
    power: Power = "on"
    alloc: dict[str, int] = field(default_factory=dict)
    drain: bool = False
    power_down_asap: bool = False
    powerup_since: float | None = None
    boot_at: float | None = None
    stop_at: float | None = None
    idle_since: float | None = None
    reason: str = ""
    machine: str = ""  # the instance whose boot made this node (the VM knows who it is)
    address: str = ""  # NodeAddr, as `scontrol update nodeaddr=` set it
    # MIG devices beside its whole GPUs (GRES type, count); a job on them is in `alloc` with 0
    mig_type: str = ""
    mig_devices: int = 0

    @property
    def used(self) -> int:
        return sum(self.alloc.values())


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of a job on a node, as slurmctld's accounting would log it: when it ran, and on
    which machine (for a burst node, the instance that booted as it)."""

    job_id: str
    node: str
    machine: str
    start_ts: float
    end_ts: float
    completed: bool


@dataclass(frozen=True, slots=True)
class BurstPartition:
    """Pre-declared CLOUD nodes `<pool>-1..count` in `partition`, as slurm.conf would list them."""

    pool: str
    partition: str
    count: int
    gpus: int = 8
    features: tuple[str, ...] = ("cloud",)
    gpu_type: str = "a100"


class FakeSlurm:
    def __init__(
        self,
        clock: Clock,
        *,
        onprem_nodes: int = 4,
        gpus_per_node: int = 8,
        gpu_type: str = "a100",
        onprem_partition: str = "onprem",
        burst: Sequence[BurstPartition] = (),
        onprem_mig: tuple[str, int] | None = None,
        boot_s: float = 120.0,
        resume_timeout_s: float = 600.0,
        suspend_timeout_s: float = 60.0,
        min_job_age_s: float = 300.0,
    ) -> None:
        self.clock = clock
        self.boot_s = boot_s
        self.resume_timeout_s = resume_timeout_s
        self.suspend_timeout_s = suspend_timeout_s
        self.min_job_age_s = min_job_age_s
        self.nodes: dict[str, FakeNode] = {}
        for i in range(1, onprem_nodes + 1):
            name = f"onprem-{i}"
            self.nodes[name] = FakeNode(
                name, NodeKind.ONPREM, gpus_per_node, onprem_partition, gpu_type, ("onprem",)
            )
            if onprem_mig is not None:  # each on-prem node also has these MIG devices
                self.nodes[name].mig_type, self.nodes[name].mig_devices = onprem_mig
        for b in burst:
            for i in range(1, b.count + 1):
                name = burst_node_name(b.pool, i)
                self.nodes[name] = FakeNode(
                    name,
                    NodeKind.BURST,
                    b.gpus,
                    b.partition,
                    b.gpu_type,
                    b.features,
                    weight=100,
                    pool=b.pool,
                    power="off",
                )
        self.jobs: dict[str, FakeJob] = {}
        self._future: list[tuple[float, int, str]] = []  # (submit_ts, seq, job id)
        self._ids = itertools.count(1001)
        self._seq = itertools.count()
        self._t = clock.now().timestamp()
        self.calls: list[tuple[str, str]] = []  # (what, target) for tests and the demo log
        self.requeues: list[tuple[str, str, float, str, bool]] = []
        self.signals: list[tuple[str, str, float]] = []  # (job, signal, when) from warn_jobs
        self.runs: list[JobRun] = []  # the job log: every run that started, ended or cut short
        self.boots: list[tuple[str, str, float]] = []  # (node, machine, when it registered)

    # ------------------------------------------------------------------ jobs

    def submit(
        self,
        gpus: int,
        duration_s: float,
        *,
        submit_ts: float | None = None,
        partition: str = "onprem",
        account: str = "",
        user: str = "",
        time_limit_s: float | None = None,
        name: str = "",
        share: ShareRequest | None = None,
    ) -> str:
        """Queue a job (now, or when the clock reaches `submit_ts`). Returns its id. A job with
        a `share` asks for MIG devices only (gpus 0)."""
        if share is not None:
            if gpus or share.kind != "mig" or share.count < 1:
                raise InvalidArgument("the fake cluster runs MIG jobs of devices only")
        elif gpus < 1 or gpus > max(n.gpus for n in self.nodes.values()):
            raise InvalidArgument(f"the fake cluster runs single-node jobs only ({gpus} GPUs)")
        jid = str(next(self._ids))
        ts = self._t if submit_ts is None else submit_ts
        self.jobs[jid] = FakeJob(
            jid, gpus, ts, duration_s, partition, account, user, time_limit_s, name, share=share
        )
        heapq.heappush(self._future, (ts, next(self._seq), jid))
        return jid

    def set_partitions(self, job_id: str, partitions: Sequence[str]) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.PENDING or job.submit_ts > self._t:
            raise InvalidArgument(f"job {job_id} is not pending")
        job.partition = ",".join(p for p in partitions if p)
        self.calls.append(("partition", f"{job_id}={job.partition}"))
        self._schedule()

    def release(self, job_id: str) -> None:
        """The fake never holds a job: releasing a pending one is a no-op, recorded."""
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.PENDING:
            raise InvalidArgument(f"job {job_id} is not pending")
        self.calls.append(("release", job_id))

    # ------------------------------------------------------------------ nodes (NodeControl)

    def _names(self, nodes: str | Iterable[str]) -> list[str]:
        names = [nodes] if isinstance(nodes, str) else list(nodes)
        for n in names:
            if n not in self.nodes:
                raise InvalidArgument(f"no node {n!r}")
        return names

    def _requeue(self, node: FakeNode, cause: str = "") -> tuple[str, ...]:
        ids = tuple(node.alloc)
        for jid in ids:
            job = self.jobs[jid]
            # (job, node, time, cause, whether it had started running): for the chaos soak
            self.requeues.append((jid, node.name, self._t, cause, node.power == "on"))
            if node.power == "on" and job.start_ts is not None:
                self._log_run(job, node, self._t, completed=False)
            job.state, job.start_ts, job.node, job.ran_in = JobState.PENDING, None, "", ""
        node.alloc.clear()
        return ids

    def drain_and_power_down(self, nodes: str | Iterable[str], reason: str) -> None:
        self.advance()
        for name in self._names(nodes):
            n = self.nodes[name]
            n.power_down_asap, n.reason = True, reason
            self.calls.append(("power_down_asap", name))
        self._settle()

    def force_power_down(self, nodes: str | Iterable[str], reason: str) -> None:
        self.advance()
        for name in self._names(nodes):
            n = self.nodes[name]
            self._requeue(n, "power_down_force")
            n.reason = reason
            self._stop(n)
            self.calls.append(("power_down_force", name))
        self._schedule()

    def mark_failed(self, nodes: str | Iterable[str], reason: str) -> tuple[str, ...]:
        self.advance()
        jobs: list[str] = []
        for name in self._names(nodes):
            n = self.nodes[name]
            jobs.extend(self._requeue(n, "mark_failed"))
            n.power, n.reason, n.boot_at, n.powerup_since = "down", reason, None, None
            self.calls.append(("down", name))
        self._schedule()
        return tuple(jobs)

    def warn_jobs(self, nodes: str | Iterable[str], signal: str, reason: str) -> tuple[str, ...]:
        """Drain (no new work) and note the signal each running job got, by job id."""
        self.advance()
        jobs: list[str] = []
        for name in self._names(nodes):
            n = self.nodes[name]
            n.drain, n.reason = True, reason
            jobs.extend(n.alloc)
            self.calls.append(("warn", name))
        if signal:
            self.signals.extend((jid, signal, self._t) for jid in jobs)
        return tuple(jobs) if signal else ()

    def set_address(self, node: str, address: str, hostname: str | None = None) -> None:
        (name,) = self._names(node)
        self.nodes[name].address = address
        self.calls.append(("nodeaddr", name))

    def resume(self, nodes: str | Iterable[str]) -> None:
        self.advance()
        for name in self._names(nodes):
            n = self.nodes[name]
            n.drain = n.power_down_asap = False
            n.reason = ""
            if n.power == "down":
                n.power = "off" if n.kind is NodeKind.BURST else "on"
                n.idle_since = self._t
            self.calls.append(("resume", name))
        self._schedule()

    def drain(self, nodes: str | Iterable[str], reason: str) -> None:
        for name in self._names(nodes):
            self.nodes[name].drain, self.nodes[name].reason = True, reason

    # ------------------------------------------------------------------ the VM boot (NodeLauncher)

    def sync(self, instances: Iterable[CloudInstance]) -> tuple[list[str], list[str]]:
        self.advance()
        started: list[str] = []
        stopped: list[str] = []
        for inst in instances:
            n = self.nodes.get(inst.node_name)
            if n is None:
                continue
            if inst.state in _UP and n.power == "booting" and n.boot_at is None:
                n.boot_at = self._t + self.boot_s
                n.machine = inst.instance_id
                started.append(n.name)
            elif inst.state in _GONE and n.power in ("on", "booting"):
                # the VM went away under Slurm: the node stops responding, its jobs requeue
                self._requeue(n, "vm_gone")
                n.power, n.reason, n.boot_at, n.powerup_since = "down", "not responding", None, None
                stopped.append(n.name)
        self._schedule()
        return started, stopped

    # ------------------------------------------------------------------ time

    def _stop(self, n: FakeNode) -> None:
        n.power, n.stop_at = "stopping", self._t + self.suspend_timeout_s
        n.boot_at = n.powerup_since = None
        n.address = ""  # a powered-down cloud node has no machine's address

    def _next_event(self) -> float | None:
        times: list[float] = []
        if self._future:
            times.append(self._future[0][0])
        for n in self.nodes.values():
            if n.power == "on":
                for jid in n.alloc:
                    job = self.jobs[jid]
                    if job.start_ts is not None:
                        times.append(job.start_ts + job.duration_s)
            elif n.power == "booting":
                if n.boot_at is not None:
                    times.append(n.boot_at)
                elif n.powerup_since is not None:
                    times.append(n.powerup_since + self.resume_timeout_s)
            elif n.power == "stopping" and n.stop_at is not None:
                times.append(n.stop_at)
        return min(times) if times else None

    def advance(self, until: float | None = None) -> None:
        """Play every event up to `until` (default: the clock's now), in time order."""
        end = self.clock.now().timestamp() if until is None else until
        while True:
            t = self._next_event()
            if t is None or t > end:
                break
            self._t = max(self._t, t)
            self._events()
            self._schedule()
        self._t = max(self._t, end)
        self._schedule()

    def _events(self) -> None:
        t = self._t
        while self._future and self._future[0][0] <= t:
            heapq.heappop(self._future)
        for n in self.nodes.values():
            if n.power == "on":
                for jid in list(n.alloc):
                    job = self.jobs[jid]
                    if job.start_ts is not None and job.start_ts + job.duration_s <= t:
                        job.state, job.end_ts = JobState.COMPLETED, job.start_ts + job.duration_s
                        job.completions += 1
                        self._log_run(job, n, job.end_ts, completed=True)
                        del n.alloc[jid]
                        if not n.alloc:
                            n.idle_since = job.end_ts
            elif n.power == "booting":
                if n.boot_at is not None and n.boot_at <= t:
                    n.power, n.boot_at, n.powerup_since = "on", None, None
                    n.idle_since = t
                    self.boots.append((n.name, n.machine, t))
                    for jid in n.alloc:  # Slurm resets the start time when the node is up
                        self.jobs[jid].start_ts = t
                elif (
                    n.boot_at is None
                    and n.powerup_since is not None
                    and n.powerup_since + self.resume_timeout_s <= t
                ):
                    self._requeue(n, "resume_timeout")
                    n.power, n.reason, n.powerup_since = "down", "ResumeTimeout reached", None
            elif n.power == "stopping" and n.stop_at is not None and n.stop_at <= t:
                n.power, n.stop_at = "off", None
                n.power_down_asap = n.drain = False
                n.reason = ""
        self._settle()

    def _log_run(self, job: FakeJob, node: FakeNode, end: float, *, completed: bool) -> None:
        assert job.start_ts is not None
        self.runs.append(JobRun(job.job_id, node.name, node.machine, job.start_ts, end, completed))

    def _settle(self) -> None:
        for n in self.nodes.values():
            if n.power_down_asap and not n.alloc and n.power in ("on", "booting"):
                self._stop(n)

    def _schedule(self) -> None:
        t = self._t
        pending = sorted(
            (j for j in self.jobs.values() if j.state is JobState.PENDING and j.submit_ts <= t),
            key=lambda j: (j.submit_ts, int(j.job_id)),
        )
        order = sorted(self.nodes.values(), key=lambda n: (n.weight, n.name))
        for job in pending:
            parts = set(job.partition.split(","))
            usable = [
                n
                for n in order
                if n.partition in parts
                and not (n.drain or n.power_down_asap)
                and n.gpus - n.used >= job.gpus
                and self._fits_share(n, job)
            ]
            node = (
                next((n for n in usable if n.power == "on"), None)
                or next((n for n in usable if n.power == "booting"), None)
                or next((n for n in usable if n.power == "off" and n.kind is NodeKind.BURST), None)
            )
            if node is None:
                continue
            if node.power == "off":
                node.power, node.powerup_since, node.boot_at = "booting", t, None
                self.calls.append(("power_up", node.name))
            node.alloc[job.job_id] = job.gpus
            job.state, job.start_ts, job.node, job.ran_in = (
                JobState.RUNNING,
                t,
                node.name,
                node.partition,
            )

    def _mig_used(self, n: FakeNode) -> int:
        return sum(s.count for jid in n.alloc if (s := self.jobs[jid].share) is not None)

    def _fits_share(self, n: FakeNode, job: FakeJob) -> bool:
        """A MIG job fits only devices of its exact GRES type, as Slurm matches them."""
        s = job.share
        if s is None:
            return True
        return n.mig_type == s.gres_type and n.mig_devices - self._mig_used(n) >= s.count

    # ------------------------------------------------------------------ observe (SlurmObserver)

    def _node_state(self, n: FakeNode) -> NodeState:
        if n.power == "down":
            return NodeState.DOWN
        if n.power == "off":
            return NodeState.POWERED_DOWN
        if n.power == "booting":
            return NodeState.POWERING_UP
        if n.power == "stopping":
            return NodeState.POWERING_DOWN
        if n.drain or n.power_down_asap:
            return NodeState.DRAINING if n.alloc else NodeState.DRAINED
        if n.used >= n.gpus:
            return NodeState.ALLOCATED
        return NodeState.MIXED if n.alloc else NodeState.IDLE

    def observe(self) -> ClusterSnapshot:
        self.advance()
        t = self._t
        jobs: list[Job] = []
        for j in self.jobs.values():
            if j.submit_ts > t:
                continue
            if j.end_ts is not None and t - j.end_ts > self.min_job_age_s:
                continue
            running = j.state is JobState.RUNNING
            jobs.append(
                Job(
                    job_id=j.job_id,
                    gpus=j.gpus,
                    submit_ts=j.submit_ts,
                    partition=j.ran_in if (running or j.end_ts) and j.ran_in else j.partition,
                    account=j.account,
                    user=j.user,
                    time_limit_s=j.time_limit_s,
                    state=j.state,
                    start_ts=j.start_ts,
                    end_ts=j.end_ts,
                    nodes=(j.node,) if j.node else (),
                    share=j.share,
                )
            )
        nodes = []
        for n in sorted(self.nodes.values(), key=lambda n: n.name):
            state = self._node_state(n)
            nodes.append(
                Node(
                    name=n.name,
                    kind=n.kind,
                    gpus=n.gpus,
                    gpus_alloc=n.used,
                    gpu_type=n.gpu_type,
                    state=state,
                    partitions=(n.partition,),
                    features=n.features,
                    weight=n.weight,
                    pool=n.pool,
                    idle_since_ts=n.idle_since if state is NodeState.IDLE else None,
                    address=n.address,
                    shares=NodeShares(
                        mig=(MigDevices(n.mig_type, n.mig_devices, self._mig_used(n)),)
                    )
                    if n.mig_devices
                    else None,
                )
            )
        return ClusterSnapshot(taken_ts=t, jobs=tuple(jobs), nodes=tuple(nodes))

    # ------------------------------------------------------------------ for the demo's summary

    def summary(self) -> dict[str, int]:
        self.advance()
        out = {"pending": 0, "running": 0, "completed": 0, "running_burst": 0}
        for j in self.jobs.values():
            if j.submit_ts > self._t:
                continue
            if j.state is JobState.PENDING:
                out["pending"] += 1
            elif j.state is JobState.RUNNING:
                out["running"] += 1
                if self.nodes[j.node].kind is NodeKind.BURST:
                    out["running_burst"] += 1
            else:
                out["completed"] += 1
        onprem = [n for n in self.nodes.values() if n.kind is NodeKind.ONPREM]
        out["onprem_gpus"] = sum(n.gpus for n in onprem)
        out["onprem_busy"] = sum(n.used for n in onprem if n.power == "on")
        out["burst_up"] = sum(
            1 for n in self.nodes.values() if n.kind is NodeKind.BURST and n.power == "on"
        )
        return out

    def with_job(self, job_id: str) -> FakeJob:
        return replace(self.jobs[job_id])
