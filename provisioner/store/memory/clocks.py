"""`ClockMarks` in memory: the clock mark of each boot and the skew of each cloud account,
over dicts."""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.clock import ClockMark
from provisioner.domain.cloud_clock import SkewEstimate
from provisioner.ports.store import ClockMarks


class MemoryClockMarks(ClockMarks):
    """`ClockMarks` over two dicts.

    Differences from SQL: no fence (no write is ever `FencedOut`)."""

    def __init__(self) -> None:
        self._marks: dict[str, ClockMark] = {}
        self._skews: dict[tuple[str, str], SkewEstimate] = {}

    def save_clock_mark(self, mark: ClockMark) -> None:
        self._marks[mark.boot_id] = ClockMark(mark.boot_id, float(mark.mono_s), float(mark.ts))

    def clock_mark(self, boot_id: str) -> ClockMark | None:
        return self._marks.get(boot_id)

    def latest_clock_ts(self) -> float:
        return max((m.ts for m in self._marks.values()), default=0.0)

    def save_cloud_skews(self, estimates: Sequence[SkewEstimate]) -> None:
        # Kept as the SQL store reads them back: the agreed span is not kept.
        self._skews.update(
            {
                (e.cloud, e.account): SkewEstimate(
                    e.cloud,
                    e.account,
                    float(e.skew_s),
                    float(e.uncertainty_s),
                    int(e.samples),
                    float(e.measured_ts),
                )
                for e in estimates
            }
        )

    def cloud_skews(self) -> list[SkewEstimate]:
        return [self._skews[key] for key in sorted(self._skews)]
