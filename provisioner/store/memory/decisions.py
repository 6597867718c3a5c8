"""`DecisionLog` in memory: the planner's decisions over a dict."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from provisioner.domain.offers import OfferKey
from provisioner.domain.plan import Decision, ReasonCode
from provisioner.domain.records import StoredDecision
from provisioner.ports.store import DecisionLog


class MemoryDecisionLog(DecisionLog):
    """`DecisionLog` over a dict. Differences from SQL: `limit`/`offset` are list slicing,
    so a negative one means what it means for a Python slice."""

    def __init__(self) -> None:
        self._rows: dict[str, StoredDecision] = {}

    def record_decisions(self, decisions: Iterable[Decision], created_ts: float) -> int:
        staged: dict[str, StoredDecision] = {}
        n = 0
        for d in decisions:
            raw = str(d.reason)
            d = _normalised(d)
            old = staged.get(d.decision_id) or self._rows.get(d.decision_id)
            if old is None:
                staged[d.decision_id] = StoredDecision(d, created_ts, reason=raw)
            else:  # content replaced; first creation time and IaC review kept
                staged[d.decision_id] = replace(old, decision=d, reason=raw)
            n += 1
        self._rows.update(staged)
        return n

    def set_iac_review(
        self, decision_id: str, review: str | Mapping[str, Any], fmt: str = ""
    ) -> bool:
        if isinstance(review, str):
            body, kind = review, fmt or "text"
        else:
            body, kind = json.dumps(review, sort_keys=True, default=str), fmt or "json"
        row = self._rows.get(decision_id)
        if row is None:
            return False
        self._rows[decision_id] = replace(row, iac_review=body, iac_review_format=kind)
        return True

    def decision(self, decision_id: str) -> StoredDecision | None:
        row = self._rows.get(decision_id)
        return _copied(row) if row is not None else None

    def decisions(
        self,
        *,
        from_ts: float | None = None,
        to_ts: float | None = None,
        reason: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[StoredDecision]:
        rows = [
            r
            for r in self._rows.values()
            if (from_ts is None or r.created_ts >= from_ts)
            and (to_ts is None or r.created_ts < to_ts)
            and (not reason or r.reason == reason)
        ]
        rows.sort(key=lambda r: (-r.created_ts, r.decision.decision_id))
        return [_copied(r) for r in rows[offset : offset + limit]]

    def decision_counts(self) -> dict[str, int]:
        return dict(Counter(r.reason for r in self._rows.values()))


def _normalised(d: Decision) -> Decision:
    """The decision as the SQL store reads it back: ids as a tuple, details as text."""
    try:
        reason = ReasonCode(str(d.reason))
    except ValueError:  # as the SQL store reads a code it does not know
        reason = ReasonCode.WAIT_WITHIN_BUDGET
    return replace(
        d,
        reason=reason,
        job_ids=tuple(d.job_ids),
        chosen=OfferKey.parse(str(d.chosen)) if d.chosen is not None else None,
        alternatives=tuple(d.alternatives),
        detail={str(k): str(v) for k, v in d.detail.items()},
    )


def _copied(row: StoredDecision) -> StoredDecision:
    """A copy whose `detail` (the one mutable part) the caller may change freely."""
    return replace(row, decision=replace(row.decision, detail=dict(row.decision.detail)))
