"""The controller's clock marks and the clouds' measured skew.

* `clock_marks`: one row per host boot: where that boot's controller clock stood on its
  monotonic clock at its last pass (`provisioner.clock.ClockMark`). A restart on the same boot
  carries the clock on from it; the highest `ts` is the floor no lifecycle stamp goes below.
* `cloud_clocks`: one row per cloud account: its skew (the cloud's clock minus the controller's)
  as last measured, for /metrics and `provisioner doctor`.

The behaviour each method promises is written on its port, `provisioner.ports.store.ClockMarks`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Float, Integer, String, func, select
from sqlalchemy.orm import Mapped, mapped_column

from provisioner.clock import ClockMark
from provisioner.domain.cloud_clock import SkewEstimate
from provisioner.ports.store import ClockMarks
from provisioner.store.engine import StoreBase
from provisioner.store.models import Base


class ClockMarkRow(Base):
    __tablename__ = "clock_marks"

    boot_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    mono_s: Mapped[float] = mapped_column(Float)
    ts: Mapped[float] = mapped_column(Float)


class CloudClockRow(Base):
    __tablename__ = "cloud_clocks"

    cloud: Mapped[str] = mapped_column(String(16), primary_key=True)
    account: Mapped[str] = mapped_column(String(128), primary_key=True)
    skew_s: Mapped[float] = mapped_column(Float)
    uncertainty_s: Mapped[float] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)
    measured_ts: Mapped[float] = mapped_column(Float)


class ClockStore(StoreBase, ClockMarks):
    def save_clock_mark(self, mark: ClockMark) -> None:
        with self.fenced_transaction() as s:
            self._upsert(
                s,
                ClockMarkRow,
                [{"boot_id": mark.boot_id, "mono_s": mark.mono_s, "ts": mark.ts}],
                update=("mono_s", "ts"),
            )

    def clock_mark(self, boot_id: str) -> ClockMark | None:
        with self.reading() as s:
            row = s.get(ClockMarkRow, boot_id)
            return ClockMark(row.boot_id, row.mono_s, row.ts) if row is not None else None

    def latest_clock_ts(self) -> float:
        with self.reading() as s:
            value = s.scalar(select(func.max(ClockMarkRow.ts)))
            return float(value) if value is not None else 0.0

    def save_cloud_skews(self, estimates: Sequence[SkewEstimate]) -> None:
        if not estimates:
            return
        with self.fenced_transaction() as s:
            self._upsert(
                s,
                CloudClockRow,
                [
                    {
                        "cloud": e.cloud,
                        "account": e.account,
                        "skew_s": e.skew_s,
                        "uncertainty_s": e.uncertainty_s,
                        "samples": e.samples,
                        "measured_ts": e.measured_ts,
                    }
                    for e in estimates
                ],
                update=("skew_s", "uncertainty_s", "samples", "measured_ts"),
            )

    def cloud_skews(self) -> list[SkewEstimate]:
        with self.reading() as s:
            rows = s.scalars(
                select(CloudClockRow).order_by(CloudClockRow.cloud, CloudClockRow.account)
            )
            return [
                SkewEstimate(
                    r.cloud, r.account, r.skew_s, r.uncertainty_s, r.samples, r.measured_ts
                )
                for r in rows
            ]
