"""The controller's runtime model: learns from the jobs it sees end, plans with what it learned.

`learn` takes the usage records the tracker closed in a pass (a job that left Slurm's running
list, with Slurm's end time when it gave one) and feeds each job's runtime, once, to the
history, then stores the names that changed. `annotate` gives pending jobs without an estimate
of their own the history's prediction (capped by their time limit), with its source and spread,
so the planner's decisions show where a runtime came from and it hedges on uncertain ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Protocol

from provisioner.domain.jobs import JobState
from provisioner.domain.records import JobUsage
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.history import RuntimeHistory


class RuntimeHistoryPort(Protocol):
    def runtime_history(self) -> dict[str, list[float]]: ...

    def save_runtime_history(self, entries: dict[str, list[float]], now_ts: float) -> None: ...


class RuntimeLearner:
    def __init__(self, store: RuntimeHistoryPort) -> None:
        self.store = store
        self.history = RuntimeHistory.from_state(store.runtime_history())

    def learn(self, closed: Iterable[JobUsage], now_ts: float) -> int:
        """Learn from the jobs whose records closed; returns how many jobs were learned."""
        spans: dict[str, tuple[float, float, JobUsage]] = {}
        for r in closed:
            if r.end_ts is None:
                continue
            lo, hi, first = spans.get(r.job_id, (r.start_ts, r.end_ts, r))
            spans[r.job_id] = (min(lo, r.start_ts), max(hi, r.end_ts), first)
        touched: set[str] = set()
        for _, (start, end, r) in sorted(spans.items()):
            if end - start <= 0:
                continue
            self.history.observe(
                user=r.user, group=r.account, partition=r.partition, runtime_s=end - start
            )
            touched |= {f"user:{r.user}", f"group:{r.account}", f"partition:{r.partition}"}
        if touched:
            state = self.history.state()
            self.store.save_runtime_history(
                {k: v for k, v in state.items() if k in touched}, now_ts
            )
        return len(spans)

    def annotate(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot with pending jobs' runtimes predicted where they have no estimate."""
        jobs = []
        changed = False
        for job in snap.jobs:
            if job.state is not JobState.PENDING or job.expected_runtime_s is not None:
                jobs.append(job)
                continue
            pred = self.history.predict(
                user=job.user,
                group=job.account,
                partition=job.partitions[0] if job.partitions else job.partition,
                time_limit_s=job.time_limit_s,
            )
            if pred is None or pred.source == "limit":
                jobs.append(job)  # nothing learned: the planner uses the limit as before
                continue
            changed = True
            jobs.append(
                replace(
                    job,
                    expected_runtime_s=pred.runtime_s,
                    runtime_source=pred.source,
                    runtime_spread_s=pred.spread_s,
                )
            )
        return replace(snap, jobs=tuple(jobs)) if changed else snap
