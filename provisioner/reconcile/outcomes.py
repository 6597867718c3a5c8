"""The per-offer back-off the stored scale-up outcomes imply, rebuilt after a restart.

It is read from each intent's stored error category. Rows completed before that column existed
(migration 0007) have none; for them, and only them, the category is the prefix of the stored
code, as it was then."""

from __future__ import annotations

from collections.abc import Iterable

from provisioner.act.backoff_feed import BackoffSettings
from provisioner.domain.failures import ErrorCategory, error_code
from provisioner.domain.intents import IntentKind, IntentStatus
from provisioner.domain.offers import OfferKey
from provisioner.domain.records import Intent
from provisioner.plan.backoff import Backoff

__all__ = ["error_code", "outcome_category", "rebuild_backoff"]


def _stored_code(it: Intent) -> str:
    """The code of the error the outcome met: the failure's, or a partial fill's shortfall."""
    if it.status is IntentStatus.FAILED:
        return it.error_code
    if it.status is IntentStatus.CONFIRMED:
        return str(it.result.get("shortfall_code", ""))
    return ""


def outcome_category(it: Intent) -> ErrorCategory | None:
    """The category of the error a completed intent met (NONE: it met none)."""
    if it.error_category is not None:
        return it.error_category
    code = _stored_code(it)  # a row from before the column: `<category>:<cloud code>`
    return ErrorCategory.parse(code.split(":", 1)[0]) if code else ErrorCategory.NONE


def rebuild_backoff(intents: Iterable[Intent], settings: BackoffSettings) -> Backoff:
    """The per-offer back-off as the stored scale-up outcomes imply it (after a restart)."""
    b = Backoff()
    events: list[tuple[float, str, Intent]] = []
    for it in intents:
        if it.kind is not IntentKind.SCALE_UP or not it.offer or it.completed_ts is None:
            continue
        # a shortfall learned after the confirmation (launch_follow) counts from when it was
        late = it.result.get("late_failure_ts")
        events.append((float(late) if late is not None else it.completed_ts, it.token, it))
    for ts, _, it in sorted(events, key=lambda e: (e[0], e[1])):
        key = OfferKey.parse(it.offer)
        category = outcome_category(it)
        if category is not None and category.backs_off:
            b = b.record_failure(key, ts, settings.initial_s, settings.max_s, _stored_code(it))
        elif it.status is IntentStatus.CONFIRMED:
            b = b.record_success(key)
    return b
