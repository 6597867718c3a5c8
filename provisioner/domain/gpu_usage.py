"""GPU time as NVML saw it, kept per UTC hour: how long each GPU was watched, how much of that
it computed (utilisation-weighted) and how long a process ran on it (busy).

Two payloads of one node bound an interval. Each GPU in both (same index and UUID) counts the
interval with the closing payload's reading, split at hour boundaries and shared equally by the
jobs tagged on it ("" when none). An interval longer than `max_gap_s` (an agent that was down,
a node that rebooted) is not counted: what happened in it is unknown, so it is neither used nor
idle. These are the "used" GPU-hours the efficiency views set against the GPU-hours paid.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

HOUR_S = 3600.0
DEFAULT_MAX_GAP_S = 300.0


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """One GPU's watched time in one UTC hour, for one job ("" for time with no job tag)."""

    hour_ts: float  # the hour's start, UTC
    node: str
    gpu_index: int
    job_id: str = ""
    observed_s: float = 0.0
    util_s: float = 0.0  # utilisation (%) / 100 × seconds: the GPU-seconds it computed
    busy_s: float = 0.0  # seconds with a process on the GPU

    @property
    def key(self) -> tuple[float, str, int, str]:
        return (self.hour_ts, self.node, self.gpu_index, self.job_id)


@dataclass(frozen=True, slots=True)
class GpuReadingAt:
    """What one GPU's reading contributes: its identity, utilisation, and whether it was busy."""

    index: int
    uuid: str
    util_pct: float | None
    busy: bool
    jobs: tuple[str, ...] = ()


def hour_of(ts: float) -> float:
    return ts - ts % HOUR_S


def usage_between(
    node: str,
    prev_ts: float,
    prev: Iterable[GpuReadingAt],
    now_ts: float,
    now: Iterable[GpuReadingAt],
    max_gap_s: float = DEFAULT_MAX_GAP_S,
) -> list[GpuUsage]:
    """The usage rows of [prev_ts, now_ts) on `node` (see the module's rule)."""
    if not 0 < now_ts - prev_ts <= max_gap_s:
        return []
    before = {g.index: g.uuid for g in prev}
    out: list[GpuUsage] = []
    for g in now:
        if g.index not in before or before[g.index] != g.uuid:
            continue  # not the same GPU at both ends: unknown in between
        jobs = g.jobs or ("",)
        a = prev_ts
        while a < now_ts:
            b = min(now_ts, hour_of(a) + HOUR_S)
            secs = (b - a) / len(jobs)
            util = (g.util_pct or 0.0) / 100.0 * secs if g.util_pct is not None else 0.0
            out += [
                GpuUsage(hour_of(a), node, g.index, job, secs, util, secs if g.busy else 0.0)
                for job in jobs
            ]
            a = b
    return out


def merged(rows: Iterable[GpuUsage]) -> list[GpuUsage]:
    """Rows of the same (hour, node, GPU, job) summed: what a store keeps."""
    acc: dict[tuple[float, str, int, str], GpuUsage] = {}
    for r in rows:
        old = acc.get(r.key)
        acc[r.key] = (
            r
            if old is None
            else GpuUsage(
                r.hour_ts,
                r.node,
                r.gpu_index,
                r.job_id,
                old.observed_s + r.observed_s,
                old.util_s + r.util_s,
                old.busy_s + r.busy_s,
            )
        )
    return sorted(acc.values(), key=lambda r: r.key)
