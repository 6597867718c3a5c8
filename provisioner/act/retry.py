"""The one retry policy for every cloud call.

Only errors whose type says `retryable` (throttling, transient) are retried in place; capacity and
quota errors go to the per-offer back-off instead, and auth or not-found errors never help on retry.
SDK clients are built with their own retries off (botocore `total_max_attempts=1`), so this is the
only place that waits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from provisioner.domain.errors import CloudError

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_ATTEMPTS = 6
DEFAULT_DEADLINE_S = 120.0


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, CloudError) and exc.retryable


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    code = getattr(exc, "code", "")
    log.warning("cloud call retry %d after %s (%s)", state.attempt_number, type(exc).__name__, code)


def cloud_retrying(
    *,
    wait: wait_base | None = None,
    stop: stop_base | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Retrying:
    """The policy. Tests inject `wait=wait_none()` (and a small `stop`) so nothing sleeps."""
    kwargs: dict[str, object] = {}
    if sleep is not None:
        kwargs["sleep"] = sleep
    return Retrying(
        retry=retry_if_exception(is_retryable),
        wait=wait if wait is not None else wait_exponential_jitter(initial=1.0, max=30.0),
        stop=stop
        if stop is not None
        else (stop_after_attempt(DEFAULT_ATTEMPTS) | stop_after_delay(DEFAULT_DEADLINE_S)),
        reraise=True,
        before_sleep=_log_retry,
        **kwargs,  # type: ignore[arg-type]
    )


def call_mapped(
    retrying: Retrying, fn: Callable[[], T], map_error: Callable[[Exception], CloudError]
) -> T:
    """Run `fn` under the policy, each failure mapped to the taxonomy first (so the policy sees
    the mapped type); the last mapped error is re-raised."""

    def attempt() -> T:
        try:
            return fn()
        except CloudError:
            raise
        except Exception as exc:
            raise map_error(exc) from exc

    return retrying(attempt)
