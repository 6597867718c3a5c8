"""Per-offer back-off after capacity or quota errors: an immutable value the planner reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from provisioner.domain.offers import OfferKey


@dataclass(frozen=True, slots=True)
class BackoffEntry:
    until_ts: float
    failures: int
    last_code: str = ""


@dataclass(frozen=True, slots=True)
class Backoff:
    entries: Mapping[OfferKey, BackoffEntry] = field(default_factory=lambda: MappingProxyType({}))

    def blocked(self, key: OfferKey, now_ts: float) -> bool:
        e = self.entries.get(key)
        return e is not None and now_ts < e.until_ts

    def blocked_at(self, now_ts: float) -> frozenset[OfferKey]:
        """Every offer blocked at `now_ts`."""
        return frozenset(k for k, e in self.entries.items() if now_ts < e.until_ts)

    def until(self, key: OfferKey) -> float | None:
        e = self.entries.get(key)
        return e.until_ts if e else None

    def record_failure(
        self, key: OfferKey, now_ts: float, initial_s: float, max_s: float, code: str = ""
    ) -> Backoff:
        prev = self.entries.get(key)
        failures = (prev.failures if prev else 0) + 1
        delay = min(max_s, initial_s * (2 ** (failures - 1)))
        new = dict(self.entries)
        new[key] = BackoffEntry(now_ts + delay, failures, code)
        return Backoff(MappingProxyType(new))

    def record_success(self, key: OfferKey) -> Backoff:
        if key not in self.entries:
            return self
        new = dict(self.entries)
        del new[key]
        return Backoff(MappingProxyType(new))
