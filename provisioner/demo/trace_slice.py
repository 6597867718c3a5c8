"""A slice of the bundled Philly trace as demo jobs for the fake cluster.

Honest about what changes: jobs larger than one node (`max_gpus`) are left out (the fake cluster
runs single-node jobs only, about 1 % of the trace); durations are capped at `max_duration_s`;
jobs submitted in the `warm_s` before the slice that would still be running at its start are
submitted at the start with their remaining time, so the cluster does not start empty. Accounts
are the trace's anonymous groups mapped onto four demo teams (stable hash).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from provisioner import data_files
from provisioner.simulate.trace import load_trace

TEAMS = ("vision", "nlp", "speech", "rl")
DEFAULT_TRACE = data_files.sample_trace()


@dataclass(frozen=True, slots=True)
class DemoJob:
    trace_id: str
    offset_s: float  # seconds after the slice start (0 for warm jobs)
    duration_s: float
    gpus: int
    account: str
    user: str
    time_limit_s: float


def team_of(group: str) -> str:
    h = int(hashlib.sha1(group.encode()).hexdigest()[:8], 16)
    return TEAMS[h % len(TEAMS)]


def time_limit(duration_s: float) -> float:
    """Users over-ask: 1.5 x the runtime, rounded up to whole minutes."""
    return 60.0 * math.ceil(1.5 * duration_s / 60.0)


def demo_jobs(
    path: Path | str = DEFAULT_TRACE,
    *,
    start_s: float = 12 * 3600.0,
    hours: float = 24.0,
    max_gpus: int = 8,
    max_duration_s: float = 8 * 3600.0,
    warm_s: float = 8 * 3600.0,
) -> list[DemoJob]:
    end_s = start_s + hours * 3600.0
    out: list[DemoJob] = []
    for j in load_trace(path):
        if j.submit_s >= end_s:
            break
        if j.gpus > max_gpus or j.submit_s < start_s - warm_s:
            continue
        dur = min(j.duration_s, max_duration_s)
        if j.submit_s < start_s:
            left = j.submit_s + dur - start_s
            if left <= 60:
                continue
            offset, dur = 0.0, left
        else:
            offset = j.submit_s - start_s
        group = j.group or j.user or "anon"
        out.append(DemoJob(j.job_id, offset, dur, j.gpus, team_of(group), group, time_limit(dur)))
    out.sort(key=lambda d: (d.offset_s, d.trace_id))
    return out
