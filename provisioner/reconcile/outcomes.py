"""Cloud-call outcomes as the store keeps them on intents: the structured error code of a failed
call, and the per-offer back-off those stored outcomes imply (rebuilt after a restart)."""

from __future__ import annotations

from collections.abc import Iterable

from provisioner.act.backoff_feed import BackoffSettings
from provisioner.domain.errors import (
    AuthError,
    CapacityError,
    CloudError,
    NotFoundError,
    QuotaError,
    ThrottlingError,
    TransientError,
)
from provisioner.domain.offers import OfferKey
from provisioner.domain.records import Intent
from provisioner.plan.backoff import Backoff

_CATEGORIES: tuple[tuple[type[CloudError], str], ...] = (
    (CapacityError, "capacity"),
    (QuotaError, "quota"),
    (ThrottlingError, "throttling"),
    (TransientError, "transient"),
    (AuthError, "auth"),
    (NotFoundError, "not_found"),
)


def error_code(err: CloudError) -> str:
    """A structured code for a failed cloud call: `<category>:<cloud code>` (the category is
    the taxonomy class, so the back-off can be rebuilt from stored intents)."""
    category = next((name for cls, name in _CATEGORIES if isinstance(err, cls)), "error")
    return f"{category}:{err.code or type(err).__name__}"[:64]


def _backs_off(code: str) -> bool:
    return code.split(":", 1)[0] in ("capacity", "quota")


def rebuild_backoff(intents: Iterable[Intent], settings: BackoffSettings) -> Backoff:
    """The per-offer back-off as the stored scale-up outcomes imply it (after a restart)."""
    b = Backoff()
    events: list[tuple[float, str, Intent]] = []
    for it in intents:
        if it.kind != "scale_up" or not it.offer or it.completed_ts is None:
            continue
        events.append((it.completed_ts, it.token, it))
    for ts, _, it in sorted(events, key=lambda e: (e[0], e[1])):
        key = OfferKey.parse(it.offer)
        short = str(it.result.get("shortfall_code", "")) if it.status == "confirmed" else ""
        code = it.error_code if it.status == "failed" else short
        if code and _backs_off(code):
            b = b.record_failure(key, ts, settings.initial_s, settings.max_s, code)
        elif it.status == "confirmed":
            b = b.record_success(key)
    return b
