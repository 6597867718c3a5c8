"""Feed cloud outcomes into the per-offer back-off: capacity and quota errors block the offer."""

from __future__ import annotations

from dataclasses import dataclass

from provisioner.config.models import Guardrails
from provisioner.domain.errors import CloudError
from provisioner.domain.offers import OfferKey
from provisioner.plan.backoff import Backoff


@dataclass(frozen=True, slots=True)
class BackoffSettings:
    initial_s: float = 300.0
    max_s: float = 3600.0

    @classmethod
    def from_guardrails(cls, guardrails: Guardrails) -> BackoffSettings:
        return cls(guardrails.backoff_initial_s, guardrails.backoff_max_s)


def record_error(
    backoff: Backoff, key: OfferKey, error: CloudError, now_ts: float, settings: BackoffSettings
) -> Backoff:
    """Back off `key` when the error says the offer itself is the problem (capacity, quota).
    Throttling, transient, auth and not-found errors say nothing about the offer."""
    if error.backoff_offer:
        return backoff.record_failure(key, now_ts, settings.initial_s, settings.max_s, error.code)
    return backoff


def record_success(backoff: Backoff, key: OfferKey) -> Backoff:
    return backoff.record_success(key)
