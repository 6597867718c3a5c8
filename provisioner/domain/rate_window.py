"""A sliding one-minute window of events per caller: the API's per-token rate limits.

Pure apart from its lock: the caller passes the time, so tests drive it with a fake clock.
"""

from __future__ import annotations

import math
import threading
from collections import deque

from provisioner.domain.errors import InvalidArgument

WINDOW_S = 60.0
# Callers idle for a whole window are forgotten once this many are tracked, so a flood of
# distinct tokens cannot grow the table without bound.
MAX_CALLERS = 10_000


class RateWindow:
    """At most `per_minute` admitted events per caller in any 60 s."""

    def __init__(self, per_minute: int) -> None:
        if per_minute < 1:
            raise InvalidArgument("per_minute must be at least 1")
        self.per_minute = per_minute
        self._lock = threading.Lock()
        self._recent: dict[str, deque[float]] = {}

    def admit(self, caller: str, now: float) -> int | None:
        """Count one event for `caller` and return None, or, over the limit, count nothing and
        return the whole seconds until one is allowed (at least 1: a `Retry-After`)."""
        with self._lock:
            times = self._recent.get(caller)
            if times is None:
                times = self._recent[caller] = deque()
            while times and now - times[0] >= WINDOW_S:
                times.popleft()
            if len(times) >= self.per_minute:
                return max(1, math.ceil(WINDOW_S - (now - times[0])))
            times.append(now)
            if len(self._recent) > MAX_CALLERS:
                self._recent = {
                    k: v for k, v in self._recent.items() if v and now - v[-1] < WINDOW_S
                }
            return None


__all__ = ["WINDOW_S", "RateWindow"]
