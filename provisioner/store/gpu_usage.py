"""NVML-observed GPU time per UTC hour, GPU and job (`ports.store.GpuUsageLog`)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Float, Index, Integer, String, delete, select
from sqlalchemy.orm import Mapped, mapped_column

from provisioner.domain.gpu_usage import GpuUsage, merged
from provisioner.ports.store import GpuUsageLog
from provisioner.store.engine import StoreBase
from provisioner.store.models import Base


class GpuUsageRow(Base):
    __tablename__ = "gpu_usage"
    __table_args__ = (Index("ix_gpu_usage_hour_ts", "hour_ts"),)

    hour_ts: Mapped[float] = mapped_column(Float, primary_key=True)
    node: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    observed_s: Mapped[float] = mapped_column(Float, default=0.0)
    util_s: Mapped[float] = mapped_column(Float, default=0.0)
    busy_s: Mapped[float] = mapped_column(Float, default=0.0)


class GpuUsageStore(StoreBase, GpuUsageLog):
    def add_gpu_usage(self, rows: Iterable[GpuUsage]) -> int:
        staged = merged(rows)
        with self.transaction() as s:
            for r in staged:
                row = s.get(GpuUsageRow, r.key)
                if row is None:
                    s.add(
                        GpuUsageRow(
                            hour_ts=r.hour_ts,
                            node=r.node,
                            gpu_index=r.gpu_index,
                            job_id=r.job_id,
                            observed_s=r.observed_s,
                            util_s=r.util_s,
                            busy_s=r.busy_s,
                        )
                    )
                else:
                    row.observed_s += r.observed_s
                    row.util_s += r.util_s
                    row.busy_s += r.busy_s
        return len(staged)

    def gpu_usage(self, from_ts: float, to_ts: float) -> list[GpuUsage]:
        q = (
            select(GpuUsageRow)
            .where(GpuUsageRow.hour_ts >= from_ts, GpuUsageRow.hour_ts < to_ts)
            .order_by(
                GpuUsageRow.hour_ts, GpuUsageRow.node, GpuUsageRow.gpu_index, GpuUsageRow.job_id
            )
        )
        with self.reading() as s:
            return [
                GpuUsage(r.hour_ts, r.node, r.gpu_index, r.job_id, r.observed_s, r.util_s, r.busy_s)
                for r in s.scalars(q)
            ]

    def prune_gpu_usage(self, before_ts: float) -> int:
        with self.transaction() as s:
            res = s.execute(delete(GpuUsageRow).where(GpuUsageRow.hour_ts < before_ts))
            return int(getattr(res, "rowcount", 0) or 0)


__all__ = ["GpuUsageRow", "GpuUsageStore"]
