"""`GpuUsageLog` in memory: hourly GPU usage over a dict."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from provisioner.domain.gpu_usage import GpuUsage, merged
from provisioner.ports.store import GpuUsageLog


class MemoryGpuUsageLog(GpuUsageLog):
    """`GpuUsageLog` over a dict keyed like the SQL table's primary key."""

    def __init__(self) -> None:
        self._rows: dict[tuple[float, str, int, str], GpuUsage] = {}

    def add_gpu_usage(self, rows: Iterable[GpuUsage]) -> int:
        staged = merged(rows)
        for r in staged:
            old = self._rows.get(r.key)
            self._rows[r.key] = (
                r
                if old is None
                else replace(
                    old,
                    observed_s=old.observed_s + r.observed_s,
                    util_s=old.util_s + r.util_s,
                    busy_s=old.busy_s + r.busy_s,
                )
            )
        return len(staged)

    def gpu_usage(self, from_ts: float, to_ts: float) -> list[GpuUsage]:
        return [r for k, r in sorted(self._rows.items()) if from_ts <= r.hour_ts < to_ts]

    def prune_gpu_usage(self, before_ts: float) -> int:
        old = [k for k, r in self._rows.items() if r.hour_ts < before_ts]
        for k in old:
            del self._rows[k]
        return len(old)
