"""`JobHistory` in memory: the jobs table over a dict."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from provisioner.domain.job_records import GONE, OPEN_STATES, JobRecord
from provisioner.ports.store import JobHistory


class MemoryJobHistory(JobHistory):
    """`JobHistory` over a dict. Differences from SQL: no fence, no retention of its own."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobRecord] = {}

    def record_jobs(self, records: Sequence[JobRecord]) -> int:
        staged: dict[str, JobRecord] = {}
        for r in records:
            old = staged.get(r.job_id) or self._jobs.get(r.job_id)
            if old is not None and r.last_seen_ts <= old.last_seen_ts:
                continue
            if old is None:
                staged[r.job_id] = replace(r, instance_ids=tuple(sorted(set(r.instance_ids))))
                continue
            keep = r.predicted_runtime_s is None
            staged[r.job_id] = replace(
                r,
                first_seen_ts=min(old.first_seen_ts, r.first_seen_ts),
                instance_ids=tuple(sorted({*old.instance_ids, *r.instance_ids})),
                predicted_runtime_s=old.predicted_runtime_s if keep else r.predicted_runtime_s,
                prediction_source=old.prediction_source if keep else r.prediction_source,
            )
        self._jobs.update(staged)
        return len(staged)

    def close_missing_jobs(self, listed: Collection[str], now_ts: float) -> int:
        keep = set(listed)
        closed = 0
        for job_id, r in list(self._jobs.items()):
            if r.state in OPEN_STATES and job_id not in keep:
                end = now_ts if r.state == "running" else None
                self._jobs[job_id] = replace(r, state=GONE, end_ts=end)
                closed += 1
        return closed

    def job_records(
        self,
        *,
        states: Collection[str] | None = None,
        team: str | None = None,
        partition: str | None = None,
        placement: str | None = None,
        ran_on: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[JobRecord]:
        out = [
            r
            for r in self._jobs.values()
            if (states is None or r.state in states)
            and (team is None or r.team == team)
            and (partition is None or r.partition == partition)
            and (placement is None or r.placement == placement)
            and (ran_on is None or ran_on in r.nodes or ran_on in r.instance_ids)
            and (until is None or r.submit_ts < until)
            and (since is None or r.open or _ended(r) >= since)
        ]
        out.sort(key=lambda r: (-r.submit_ts, r.job_id))
        out = out[offset:]
        return out[:limit] if limit is not None else out

    def job_record(self, job_id: str) -> JobRecord | None:
        return self._jobs.get(job_id)

    def prune_jobs(self, before_ts: float) -> int:
        old = [k for k, r in self._jobs.items() if not r.open and r.last_seen_ts < before_ts]
        for k in old:
            del self._jobs[k]
        return len(old)


def _ended(r: JobRecord) -> float:
    return r.end_ts if r.end_ts is not None else r.last_seen_ts
