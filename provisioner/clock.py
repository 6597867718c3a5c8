"""The injected clock. Nothing outside bootstrap reads the wall clock directly.

`SteadyClock` is the controller's own clock: UTC that never runs backwards and advances at the
rate of the host's monotonic clock, so durations (join timeouts, leases, billed seconds) are
measured on a monotonic clock even when NTP steps the wall clock. It follows the wall clock only
by slewing (at most `max_slew` seconds per second, ntpd's 500 ppm by default), and carries on
across a restart of the process on the same boot from a `ClockMark` the store keeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from provisioner.domain.errors import InvalidArgument


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """Wall clock, always timezone-aware UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock tests and the simulator move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise InvalidArgument("ManualClock needs a timezone-aware UTC datetime")

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now = self._now + timedelta(seconds=seconds)
        return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise InvalidArgument("ManualClock needs a timezone-aware UTC datetime")
        self._now = when


@dataclass(frozen=True, slots=True)
class ClockMark:
    """Where a controller's clock stood: `ts` (UTC seconds) when the host's monotonic clock of
    boot `boot_id` read `mono_s`. The store keeps the last one per boot, so a restart on the same
    boot carries on from it, and the highest `ts` is the floor no stamp may go below."""

    boot_id: str
    mono_s: float
    ts: float


# ntpd's largest slew; chrony allows more. Durations are off by at most this fraction while the
# controller catches up with a stepped wall clock.
DEFAULT_MAX_SLEW = 5e-4
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_monotonic() -> float:
    """Seconds since boot on a clock no wall-clock step moves, suspend included (Linux
    CLOCK_BOOTTIME; CLOCK_MONOTONIC elsewhere). Shared by every process of the boot."""
    clk = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clk) if clk is not None else time.monotonic()


def read_boot_id() -> str:
    """This boot's id: a restart on the same boot may carry the clock on, another may not."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


class SteadyClock:
    """The controller's clock: never runs backwards, advances at the monotonic clock's rate,
    slews towards the wall clock at most `max_slew` s/s. A wall-clock step (NTP) moves it only by
    that slew: a step back holds, a step forward is caught up slowly. Thread-safe."""

    def __init__(
        self,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = boot_monotonic,
        boot_id: str | None = None,
        max_slew: float = DEFAULT_MAX_SLEW,
    ) -> None:
        if not 0 <= max_slew < 1:
            raise InvalidArgument(f"max_slew must be in [0, 1), got {max_slew!r}")
        self._wall = wall
        self._mono = monotonic
        self.boot_id = read_boot_id() if boot_id is None else boot_id
        self.max_slew = max_slew
        self._lock = threading.Lock()
        self._last_mono = monotonic()
        self._last = wall()
        self.resumed = False

    def resume(self, mark: ClockMark | None, floor_ts: float) -> None:
        """Start from the store: on the boot that left `mark`, carry on from it by the monotonic
        clock (whatever the wall clock did meanwhile); elsewhere start at the wall clock. Never
        below `floor_ts`, the latest stamp any controller wrote."""
        with self._lock:
            self.resumed = True
            m = self._mono()
            if mark is not None and mark.boot_id == self.boot_id and m >= mark.mono_s:
                start = mark.ts + (m - mark.mono_s)
            else:
                start = self._wall()
            self._last = max(start, floor_ts)
            self._last_mono = m

    def hold_at_least(self, ts: float) -> None:
        """Never answer below `ts` again (another controller's stamp, read from the store)."""
        with self._lock:
            self._last = max(self._last, ts)

    def _tick(self) -> float:
        m = self._mono()
        elapsed = max(0.0, m - self._last_mono)
        steady = self._last + elapsed
        limit = self.max_slew * elapsed
        self._last = steady + min(limit, max(-limit, self._wall() - steady))
        self._last_mono = m
        return self._last

    def now_ts(self) -> float:
        with self._lock:
            return self._tick()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ts(), UTC)

    def mark(self) -> ClockMark:
        with self._lock:
            ts = self._tick()
            return ClockMark(self.boot_id, self._last_mono, ts)

    def wall_offset_s(self) -> float:
        """The wall clock minus this clock: how far a step moved the host's clock that the slew
        has not caught up yet (0 on a quiet host)."""
        with self._lock:
            return self._wall() - self._tick()


def utc(dt: datetime) -> datetime:
    """Return dt as aware UTC; naive datetimes are taken to be UTC already."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)
