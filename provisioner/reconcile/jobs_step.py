"""Record: every job of a pass's snapshot into the jobs table (`ports.store.JobHistory`).

Only the jobs whose content changed since this process last wrote them are written, so a queue
of thousands costs a write when something happens to a job, not one per job per pass. After a
restart (or a failover) the first pass writes every job once. A job a complete listing no
longer holds is closed as `gone`: Slurm forgot it before the controller saw how it ended.
"""

from __future__ import annotations

from typing import Protocol

from provisioner.config.models import Policy
from provisioner.domain.job_records import job_records
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.ports.store import GpuUsageLog, JobHistory

DAY_S = 86_400.0


class JobsStore(JobHistory, GpuUsageLog, Protocol):
    """The jobs table, and the hourly GPU usage kept as long."""


class JobsRecorder:
    def __init__(self, store: JobsStore, policy: Policy) -> None:
        self.store = store
        self.policy = policy
        self._written: dict[str, tuple[object, ...]] = {}

    def record(self, view: ClusterSnapshot, now: float) -> int:
        """Write the snapshot's changed jobs and close the missing ones; returns rows written.
        A stale snapshot, or one with no Slurm nodes at all (no scheduler wired), records
        nothing: its job list is not a complete listing."""
        if view.stale or not view.nodes:
            return 0
        # a node name's latest instance (an ended one may still be listed beside it)
        nodes = {
            i.node_name: i
            for i in sorted(view.instances, key=lambda i: i.launched_ts)
            if i.node_name
        }
        records = job_records(view.jobs, nodes, self.policy.budgets.team_for, now)
        changed = [r for r in records if self._written.get(r.job_id) != r.content()]
        n = self.store.record_jobs(changed)
        listed = {r.job_id for r in records}
        if any(job_id not in listed for job_id in self._written) or not self._written:
            self.store.close_missing_jobs(listed, now)
        self._written = {r.job_id: r.content() for r in records}
        return n

    def prune(self, now: float) -> int:
        """Jobs, and the hourly GPU usage their efficiency is read from, kept alike."""
        before = now - self.policy.jobs.retention_days * DAY_S
        self.store.prune_gpu_usage(before)
        return self.store.prune_jobs(before)


__all__ = ["JobsRecorder"]
