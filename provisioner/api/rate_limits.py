"""Per-token rate limits on the expensive endpoints, answered with a 429 and `Retry-After`.

Each bearer token (a user, an agent, a script) gets its own one-minute window per endpoint,
so one heavy reader cannot take the controller's CPU from the loop or from other readers. The
limits are for the wall clock (the API's cost is real seconds), not the controller's clock,
which the demo runs faster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import HTTPException

from provisioner.api.auth import Principal
from provisioner.domain.rate_window import RateWindow


@dataclass(frozen=True)
class RateLimits:
    """Requests per token per minute: the FOCUS export (a full read of the ledger) and cost
    reports (a GROUP BY over the month's rollups)."""

    focus_exports_per_minute: int = 6
    cost_reports_per_minute: int = 60


@dataclass
class ApiRateLimiter:
    limits: RateLimits = field(default_factory=RateLimits)
    clock: Callable[[], float] = time.monotonic
    _windows: dict[str, RateWindow] = field(init=False)

    def __post_init__(self) -> None:
        self._windows = {
            "FOCUS exports": RateWindow(self.limits.focus_exports_per_minute),
            "cost reports": RateWindow(self.limits.cost_reports_per_minute),
        }

    def check(self, what: str, principal: Principal) -> None:
        """Count one `what` ("FOCUS exports", "cost reports") for the principal's token, or
        raise a 429 naming the limit, with `Retry-After`."""
        window = self._windows[what]
        retry = window.admit(principal.token_id, self.clock())
        if retry is not None:
            raise HTTPException(
                429,
                f"at most {window.per_minute} {what} a minute per token; retry in {retry} s",
                headers={"Retry-After": str(retry)},
            )


__all__ = ["ApiRateLimiter", "RateLimits"]
