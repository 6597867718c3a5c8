"""The jobs table (`ports.store.JobHistory`): one row per job id, as Slurm last showed it.

The loop writes only the jobs whose content changed in a pass (reconcile/accounting_step.py),
so a long queue costs a write when something happens to a job, not every pass.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import JSON, Float, Index, Integer, String, cast, delete, or_, select
from sqlalchemy.orm import Mapped, mapped_column

from provisioner.domain.job_records import GONE, OPEN_STATES, JobRecord, where_job_ran
from provisioner.ports.store import JobHistory
from provisioner.store.engine import StoreBase
from provisioner.store.models import Base


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_submit_ts", "submit_ts"),
        Index("ix_jobs_state", "state"),
        Index("ix_jobs_team_submit_ts", "team", "submit_ts"),
    )

    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    submit_ts: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_type: Mapped[str] = mapped_column(String(64), default="")
    partition: Mapped[str] = mapped_column(String(128), default="")
    account: Mapped[str] = mapped_column(String(128), default="")
    user: Mapped[str] = mapped_column(String(128), default="")
    team: Mapped[str] = mapped_column(String(128), default="")
    eligible_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    start_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    time_limit_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    nodes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    instance_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    placement: Mapped[str] = mapped_column(String(8), default="")
    first_seen_ts: Mapped[float] = mapped_column(Float)
    last_seen_ts: Mapped[float] = mapped_column(Float)
    predicted_runtime_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    prediction_source: Mapped[str] = mapped_column(String(16), default="")


_FIELDS = (
    "submit_ts", "state", "gpus", "gpu_type", "partition", "account", "user", "team",
    "eligible_ts", "start_ts", "end_ts", "time_limit_s", "last_seen_ts",
)  # fmt: skip


def _record(r: JobRow) -> JobRecord:
    return JobRecord(
        job_id=r.job_id,
        submit_ts=r.submit_ts,
        state=r.state,
        gpus=r.gpus,
        gpu_type=r.gpu_type,
        partition=r.partition,
        account=r.account,
        user=r.user,
        team=r.team,
        eligible_ts=r.eligible_ts,
        start_ts=r.start_ts,
        end_ts=r.end_ts,
        time_limit_s=r.time_limit_s,
        nodes=tuple(str(n) for n in r.nodes or ()),
        instance_ids=tuple(str(i) for i in r.instance_ids or ()),
        first_seen_ts=r.first_seen_ts,
        last_seen_ts=r.last_seen_ts,
        predicted_runtime_s=r.predicted_runtime_s,
        prediction_source=r.prediction_source,
    )


class JobStore(StoreBase, JobHistory):
    def record_jobs(self, records: Sequence[JobRecord]) -> int:
        if not records:
            return 0
        n = 0
        with self.fenced_transaction() as s:
            for rec in records:
                row = s.get(JobRow, rec.job_id)
                new = row is None
                if row is None:
                    row = JobRow(job_id=rec.job_id, first_seen_ts=rec.first_seen_ts)
                    s.add(row)
                elif rec.last_seen_ts <= row.last_seen_ts:
                    continue
                else:
                    row.first_seen_ts = min(row.first_seen_ts, rec.first_seen_ts)
                for f in _FIELDS:
                    setattr(row, f, getattr(rec, f))
                row.nodes = list(rec.nodes)
                row.instance_ids = sorted({*(row.instance_ids or ()), *rec.instance_ids})
                row.placement = where_job_ran(row.nodes, row.instance_ids)  # the merged row's
                if new or rec.predicted_runtime_s is not None:
                    row.predicted_runtime_s = rec.predicted_runtime_s
                    row.prediction_source = rec.prediction_source
                s.flush()
                n += 1
        return n

    def close_missing_jobs(self, listed: Collection[str], now_ts: float) -> int:
        keep = set(listed)
        n = 0
        with self.fenced_transaction() as s:
            q = select(JobRow).where(JobRow.state.in_(sorted(OPEN_STATES)))
            for row in s.scalars(q):
                if row.job_id in keep:
                    continue
                if row.state == "running":
                    row.end_ts = now_ts
                row.state = GONE
                n += 1
        return n

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
        q = select(JobRow)
        if states is not None:
            q = q.where(JobRow.state.in_(sorted(states)))
        if team is not None:
            q = q.where(JobRow.team == team)
        if partition is not None:
            q = q.where(JobRow.partition == partition)
        if placement is not None:
            q = q.where(JobRow.placement == placement)
        if ran_on is not None:
            # JSON lists: a quoted element of either, read as text (SQLite and PostgreSQL alike)
            text = json.dumps(ran_on)
            for ch in ("\\", "%", "_"):  # LIKE's own characters, taken literally
                text = text.replace(ch, "\\" + ch)
            quoted = f"%{text}%"
            q = q.where(
                or_(
                    cast(JobRow.nodes, String).like(quoted, escape="\\"),
                    cast(JobRow.instance_ids, String).like(quoted, escape="\\"),
                )
            )
        if until is not None:
            q = q.where(JobRow.submit_ts < until)
        if since is not None:
            q = q.where(
                or_(
                    JobRow.state.in_(sorted(OPEN_STATES)),
                    JobRow.end_ts >= since,
                    (JobRow.end_ts.is_(None)) & (JobRow.last_seen_ts >= since),
                )
            )
        q = q.order_by(JobRow.submit_ts.desc(), JobRow.job_id).offset(offset)
        if limit is not None:
            q = q.limit(limit)
        with self.reading() as s:
            return [_record(r) for r in s.scalars(q)]

    def job_record(self, job_id: str) -> JobRecord | None:
        with self.reading() as s:
            row = s.get(JobRow, job_id)
            return _record(row) if row is not None else None

    def prune_jobs(self, before_ts: float) -> int:
        with self.transaction() as s:
            res = s.execute(
                delete(JobRow).where(
                    JobRow.state.not_in(sorted(OPEN_STATES)), JobRow.last_seen_ts < before_ts
                )
            )
            return int(getattr(res, "rowcount", 0) or 0)


__all__ = ["JobRow", "JobStore"]
