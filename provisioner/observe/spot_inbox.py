"""Spot warnings between the API thread that takes them and the pass that acts on them.

A warning is held until its instance's record closes: the first report of each (instance,
kind) counts, later ones (the watcher repeats its report while the warning stands, so a
leader that changes in the window still hears it) only wake the loop again. Each post wakes
the controller loop at once: GCE's 30 seconds are shorter than a tick.

Held in memory, by the process whose API took the report: a controller that restarts inside
the window hears the watcher's next report. Where none comes, the instance's end is still
met the usual way, as a VM the cloud took away.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from provisioner.domain.spot_warnings import SpotWarning, WarningKind

Key = tuple[str, WarningKind]


class SpotInbox:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Key, SpotWarning] = {}
        self._signalled: dict[str, float] = {}  # instance id -> when its jobs were signalled
        self._wakers: list[Callable[[], None]] = []

    def on_post(self, waker: Callable[[], None]) -> None:
        """Call `waker` after every post (the loop's wake-up)."""
        with self._lock:
            self._wakers.append(waker)

    def post(self, warning: SpotWarning) -> bool:
        """Hold the warning; False when one of its kind for its instance is held already."""
        with self._lock:
            new = warning.key not in self._held
            if new:
                self._held[warning.key] = warning
            wakers = list(self._wakers)
        for wake in wakers:
            wake()
        return new

    def held(self) -> dict[str, tuple[SpotWarning, ...]]:
        """Instance id -> its warnings, oldest first."""
        with self._lock:
            out: dict[str, list[SpotWarning]] = {}
            for w in sorted(self._held.values(), key=lambda w: w.noticed_ts):
                out.setdefault(w.instance_id, []).append(w)
        return {k: tuple(v) for k, v in out.items()}

    def signalled(self) -> dict[str, float]:
        with self._lock:
            return dict(self._signalled)

    def mark_signalled(self, instance_id: str, ts: float) -> None:
        with self._lock:
            self._signalled.setdefault(instance_id, ts)

    def keep_only(self, live_ids: Iterable[str]) -> None:
        """Forget the warnings of instances whose records have closed."""
        live = set(live_ids)
        with self._lock:
            for key in [k for k in self._held if k[0] not in live]:
                del self._held[key]
            for iid in [i for i in self._signalled if i not in live]:
                del self._signalled[iid]


__all__ = ["SpotInbox"]
