"""The Slurm side of a pass: partitions widened for burst jobs (or, for jobs held after a failed
launch, set to a burst partition and released), idle burst nodes drained
(`power_down_asap`), nodes resumed or marked failed. The fence is checked before each call into
Slurm; what a call did is handed back as a `SlurmOutcome` for the pass report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from provisioner.domain.errors import ProvisionerError
from provisioner.domain.instances import InstanceState
from provisioner.domain.jobs import Job
from provisioner.domain.plan import Drain
from provisioner.register.instance_records import InstanceRecords
from provisioner.register.ports import JobControl, NodeControl

# The loop's logger: these lines were always part of the pass's log stream.
log = logging.getLogger("provisioner.loop")

# Where a crash matters; the hook is called there (tests raise or SIGKILL there).
STEP_DRAIN_AFTER_SLURM = "scale_down.during_drain"

Hook = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class SlurmOutcome:
    errors: tuple[str, ...] = ()
    jobs_moved: int = 0
    drained: int = 0


NOTHING = SlurmOutcome()


class SlurmRegistrar:
    """Each port may be None (not wired): its calls are then skipped."""

    def __init__(
        self,
        *,
        records: InstanceRecords,
        node_control: NodeControl | None,
        job_control: JobControl | None,
        controller: str,
        hook: Hook | None = None,
    ) -> None:
        self.records = records
        self.node_control = node_control
        self.job_control = job_control
        self.controller = controller
        self._hook = hook

    def fix_node(self, node: str, action: str, reason: str) -> SlurmOutcome:
        """`resume` (back to service), `drain` (power down when idle), else mark it failed
        (its jobs requeue)."""
        ctl = self.node_control
        if ctl is None:
            return NOTHING
        self.records.check_fence()
        try:
            if action == "resume":
                ctl.resume(node)
            elif action == "drain":
                ctl.drain_and_power_down(node, reason)
            else:
                ctl.mark_failed(node, reason)
            log.info("slurm node %s: %s (%s)", node, action, reason)
        except ProvisionerError as exc:
            return SlurmOutcome(errors=(f"node {node} {action}: {exc}",))
        return NOTHING

    def warn_jobs(self, node: str, signal: str, reason: str) -> SlurmOutcome:
        """A spot warning: drain the node and signal its running jobs (they may checkpoint)."""
        ctl = self.node_control
        if ctl is None:
            return NOTHING
        self.records.check_fence()
        try:
            jobs = ctl.warn_jobs(node, signal, reason)
        except ProvisionerError as exc:
            return SlurmOutcome(errors=(f"node {node} warn: {exc}",))
        log.info("slurm node %s: drained, jobs %s signalled %s (%s)", node, jobs, signal, reason)
        return NOTHING

    def set_address(self, node: str, address: str) -> SlurmOutcome:
        """NodeAddr (and NodeHostname) of a node powering up: the address of the instance
        bound to it, from the cloud, before the instance learns the node's name."""
        ctl = self.node_control
        if ctl is None:
            return NOTHING
        self.records.check_fence()
        try:
            ctl.set_address(node, address)
        except ProvisionerError as exc:
            return SlurmOutcome(errors=(f"node {node} nodeaddr={address}: {exc}",))
        log.info("slurm node %s: NodeAddr %s", node, address)
        return NOTHING

    def move_jobs(
        self, job_ids: Iterable[str], partition: str, jobs: Mapping[str, Job]
    ) -> SlurmOutcome:
        """Let Slurm place burst jobs on a pool's nodes: add the pool's partition."""

        def widen(ctl: JobControl, job: Job) -> str | None:
            if partition in job.partitions:
                return None
            parts = [*job.partitions, partition]
            ctl.set_partitions(job.job_id, parts)
            return f"job {job.job_id} may now run in {','.join(parts)}"

        return self._update_jobs(job_ids, jobs, widen)

    def release_jobs(
        self, job_ids: Iterable[str], partition: str, jobs: Mapping[str, Job]
    ) -> SlurmOutcome:
        """Put jobs Slurm held after a failed launch back in the queue, in the pool's burst
        partition only: a cloud node is the one place such a job can launch (see Job)."""

        def release(ctl: JobControl, job: Job) -> str | None:
            if not job.launch_failed:
                return None
            ctl.set_partitions(job.job_id, [partition])
            ctl.release(job.job_id)
            return f"job {job.job_id} held after a failed launch: released into {partition}"

        return self._update_jobs(job_ids, jobs, release)

    def _update_jobs(
        self,
        job_ids: Iterable[str],
        jobs: Mapping[str, Job],
        update: Callable[[JobControl, Job], str | None],
    ) -> SlurmOutcome:
        """Fenced, one job at a time: `update` returns what it did (logged), or None when the
        job needs nothing; a job Slurm refuses is reported and the others still go."""
        ctl = self.job_control
        if ctl is None:
            return NOTHING
        self.records.check_fence()
        moved = 0
        errors: list[str] = []
        for jid in job_ids:
            job = jobs.get(jid)
            if job is None:
                continue
            try:
                done = update(ctl, job)
            except (ProvisionerError, ValueError) as exc:
                errors.append(f"job {jid}: {exc}")
                continue
            if done is not None:
                moved += 1
                log.info("%s", done)
        return SlurmOutcome(errors=tuple(errors), jobs_moved=moved)

    def drain(self, dr: Drain, now: float) -> SlurmOutcome:
        """Drain a ready burst node the planner found idle, then mark its record draining."""
        si = self.records.instance(dr.instance_id) if dr.instance_id else None
        ctl = self.node_control
        if si is None or si.instance.state is not InstanceState.READY or ctl is None:
            return NOTHING
        did = dr.decision.decision_id
        self.records.check_fence()
        try:
            ctl.drain_and_power_down(dr.node, f"idle, drained by {self.controller} ({did})")
        except ProvisionerError as exc:
            return SlurmOutcome(errors=(f"drain {dr.node}: {exc}",))
        if self._hook is not None:
            self._hook(STEP_DRAIN_AFTER_SLURM)
        self.records.transition(dr.instance_id, InstanceState.DRAINING, now, f"idle: {did}")
        log.info("draining %s (%s)", dr.node, dr.instance_id)
        return SlurmOutcome(drained=1)
