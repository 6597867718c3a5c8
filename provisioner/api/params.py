"""Query parameters shared by several routes: times (`from`, `to`), windows and paging."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, time
from typing import Annotated, Any

from fastapi import HTTPException, Query
from fastapi.exceptions import RequestValidationError
from pydantic import BeforeValidator

from provisioner.api.deps import ApiDeps
from provisioner.domain.errors import InvalidArgument

MAX_LIMIT = 1000
MAX_POSIX_S = 1e10  # year 2286; a bigger number is milliseconds, which are refused


def _seconds_only(value: Any) -> Any:
    """Refuse a number past `MAX_POSIX_S`: pydantic would silently read it as milliseconds."""
    text = value.strip() if isinstance(value, str) else value
    try:
        number = float(text)
    except (TypeError, ValueError):
        return value
    if not math.isfinite(number) or abs(number) >= MAX_POSIX_S:
        raise InvalidArgument(f"POSIX seconds must be below {MAX_POSIX_S:.0e} (not milliseconds)")
    return value


When = Annotated[
    datetime | date | None,
    BeforeValidator(_seconds_only),
    Query(description="ISO 8601 date or date-time (UTC if no offset), or POSIX seconds."),
]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]
Offset = Annotated[int, Query(ge=0, le=10**9)]


def ts(value: datetime | date | None, name: str) -> float | None:
    """POSIX seconds of a query time (a date is its UTC midnight); 400 if it has none."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime.combine(value, time(0), tzinfo=UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        seconds = value.timestamp()
    except (OverflowError, OSError, ValueError):
        seconds = math.inf
    if not math.isfinite(seconds) or not 0 <= seconds < MAX_POSIX_S:
        # a time past year 2286 (9999-12-31T23:59:59-14:00 is in year 10000 UTC, which no
        # datetime holds) would fail deep in a report as a 500: refused as FastAPI refuses any
        # other bad query value, so the 422 has the schema's shape
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("query", name),
                    "msg": f"{name}: must fall between 1970 and 2286 (UTC)",
                    "input": str(value),
                }
            ]
        )
    return seconds


def span(
    from_: datetime | date | None, to: datetime | date | None
) -> tuple[float | None, float | None]:
    """[from, to) with either end open; 400 when both are given and `to` is not after `from`."""
    f, t = ts(from_, "from"), ts(to, "to")
    if f is not None and t is not None and not t > f:
        raise HTTPException(400, "'to' must be after 'from'")
    return f, t


def window(
    deps: ApiDeps, from_: datetime | date | None, to: datetime | date | None
) -> tuple[float, float]:
    """[from, to): defaults are the start of this UTC month and now."""
    now = deps.clock.now().astimezone(UTC)
    f = ts(from_, "from")
    t = ts(to, "to")
    if f is None:
        f = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
    if t is None:
        t = now.timestamp()
    if not t > f:
        raise HTTPException(400, "'to' must be after 'from'")
    return f, t


__all__ = ["MAX_LIMIT", "MAX_POSIX_S", "Limit", "Offset", "When", "span", "ts", "window"]
