"""Runtimes learned from history: what a pending job will probably run, from jobs that ended.

Only what is known at decision time is used: the runtimes of jobs already completed. The
prediction is the average of the same user's last two completed jobs (Tsafrir, Etsion and
Feitelson, "Backfilling using system-generated predictions rather than user runtime estimates",
TPDS 2007); a user with no history falls back to the group (Slurm account), then the
partition. A Slurm time limit, when the job has one, caps the prediction (the job is killed at
its limit); with no history at all the limit itself is the estimate, else the caller's default.

Each level also keeps a spread (the standard deviation of its last few runtimes), so the planner
can tell a steady user from an erratic one and hedge (see planner.py, the no-regret rule). Pure:
no I/O, no clock; `state()` and `from_state()` let the controller persist it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from provisioner.domain.errors import InvalidArgument

Source = Literal["user", "group", "partition", "limit", "default"]
LEVELS: tuple[Literal["user", "group", "partition"], ...] = ("user", "group", "partition")
KEEP = 8  # runtimes kept per user, group and partition: enough for a spread, cheap to store


@dataclass(frozen=True, slots=True)
class RuntimePrediction:
    runtime_s: float
    source: Source
    samples: int  # completed jobs behind it (0 for a limit or the default)
    spread_s: float | None  # None: unknown (fewer than two samples, a limit, the default)

    @property
    def cv(self) -> float:
        """Spread relative to the runtime; infinite when unknown."""
        if self.spread_s is None or self.runtime_s <= 0:
            return math.inf
        return self.spread_s / self.runtime_s


def _spread(values: Iterable[float]) -> float | None:
    xs = list(values)
    if len(xs) < 2:
        return None
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


class RuntimeHistory:
    """Recent completed runtimes per user, group and partition."""

    def __init__(self, keep: int = KEEP) -> None:
        if keep < 2:
            raise InvalidArgument("keep must be >= 2: the prediction averages the last two")
        self.keep = keep
        self._recent: dict[tuple[str, str], deque[float]] = {}
        self.observed = 0

    def observe(self, *, user: str, group: str, partition: str, runtime_s: float) -> None:
        """Record a completed job. Empty names are skipped (the trace may not carry users)."""
        if runtime_s <= 0 or not math.isfinite(runtime_s):
            return
        self.observed += 1
        for level, name in zip(LEVELS, (user, group, partition), strict=True):
            if not name:
                continue
            q = self._recent.get((level, name))
            if q is None:
                q = self._recent[(level, name)] = deque(maxlen=self.keep)
            q.append(runtime_s)

    def predict(
        self,
        *,
        user: str,
        group: str,
        partition: str,
        time_limit_s: float | None = None,
        default_s: float | None = None,
    ) -> RuntimePrediction | None:
        """The runtime to plan with, and where it came from; None with no history, no limit
        and no default."""
        for level, name in zip(LEVELS, (user, group, partition), strict=True):
            q = self._recent.get((level, name)) if name else None
            if not q:
                continue
            last = list(q)[-2:]
            runtime = sum(last) / len(last)
            spread = _spread(q)
            if time_limit_s is not None and runtime > time_limit_s:
                runtime = time_limit_s
            return RuntimePrediction(runtime, level, len(q), spread)
        if time_limit_s is not None:
            return RuntimePrediction(time_limit_s, "limit", 0, None)
        if default_s is not None:
            return RuntimePrediction(default_s, "default", 0, None)
        return None

    # ---- persistence ---------------------------------------------------------------------

    def state(self) -> dict[str, list[float]]:
        """`{"level:name": [runtimes, oldest first]}`: what the store keeps."""
        return {f"{lv}:{name}": list(q) for (lv, name), q in sorted(self._recent.items())}

    @classmethod
    def from_state(cls, state: Mapping[str, Iterable[float]], keep: int = KEEP) -> RuntimeHistory:
        hist = cls(keep)
        for key, values in state.items():
            level, _, name = key.partition(":")
            if level not in LEVELS or not name:
                continue  # written by a newer version, or damaged: skip rather than guess
            q: deque[float] = deque(maxlen=keep)
            q.extend(float(v) for v in values if float(v) > 0)
            if q:
                hist._recent[(level, name)] = q
        return hist
