"""Per-offer back-off after capacity or quota errors (immutable).

The planner skips a blocked offer and picks the next-best one; the actuator records failures and
successes. Meant to move to `provisioner.plan.backoff` (the planner owns it); kept tiny so it can.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from provisioner.domain.offers import OfferKey


@dataclass(frozen=True, slots=True)
class BackoffEntry:
    failures: int
    until_ts: float


def _frozen(entries: Mapping[OfferKey, BackoffEntry]) -> Mapping[OfferKey, BackoffEntry]:
    return MappingProxyType(dict(entries))


@dataclass(frozen=True, slots=True)
class Backoff:
    entries: Mapping[OfferKey, BackoffEntry] = field(default_factory=lambda: _frozen({}))

    def blocked(self, key: OfferKey, now_ts: float) -> bool:
        entry = self.entries.get(key)
        return entry is not None and now_ts < entry.until_ts

    def until(self, key: OfferKey) -> float | None:
        entry = self.entries.get(key)
        return entry.until_ts if entry is not None else None

    def record_failure(
        self, key: OfferKey, now_ts: float, initial_s: float, max_s: float
    ) -> Backoff:
        """Exponential: initial_s, 2x, 4x, ... capped at max_s."""
        prev = self.entries.get(key)
        failures = (prev.failures if prev else 0) + 1
        delay = min(max_s, initial_s * (2 ** min(failures - 1, 30)))
        entries = dict(self.entries)
        entries[key] = BackoffEntry(failures, now_ts + delay)
        return Backoff(_frozen(entries))

    def record_success(self, key: OfferKey) -> Backoff:
        if key not in self.entries:
            return self
        entries = dict(self.entries)
        del entries[key]
        return Backoff(_frozen(entries))
