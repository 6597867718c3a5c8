"""The injected clock. Nothing outside bootstrap reads the wall clock directly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
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


def utc(dt: datetime) -> datetime:
    """Return dt as aware UTC; naive datetimes are taken to be UTC already."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)
