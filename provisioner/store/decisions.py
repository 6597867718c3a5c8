"""The planner's decisions and the IaC reviews attached to them. The behaviour each method
promises is written on its port, `provisioner.ports.store.DecisionLog`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select

from provisioner.domain.offers import OfferKey
from provisioner.domain.plan import Alternative, Decision, ReasonCode, Rejection
from provisioner.domain.records import StoredDecision
from provisioner.ports.store import DecisionLog
from provisioner.store.engine import StoreBase
from provisioner.store.models import DecisionRow


class DecisionStore(StoreBase, DecisionLog):
    # ------------------------------------------------------------------ decisions

    def record_decisions(self, decisions: Iterable[Decision], created_ts: float) -> int:
        n = 0
        with self.fenced_transaction() as s:
            for d in decisions:
                row = s.get(DecisionRow, d.decision_id)
                if row is None:
                    row = DecisionRow(decision_id=d.decision_id, created_ts=created_ts)
                    s.add(row)
                _fill_decision(row, d)
                n += 1
        return n

    def set_iac_review(
        self, decision_id: str, review: str | Mapping[str, Any], fmt: str = ""
    ) -> bool:
        if isinstance(review, str):
            body, kind = review, fmt or "text"
        else:
            body, kind = json.dumps(review, sort_keys=True, default=str), fmt or "json"
        with self.transaction() as s:
            row = s.get(DecisionRow, decision_id)
            if row is None:
                return False
            row.iac_review = body
            row.iac_review_format = kind
            return True

    def decision(self, decision_id: str) -> StoredDecision | None:
        with self.reading() as s:
            row = s.get(DecisionRow, decision_id)
            return _decision(row) if row else None

    def decisions(
        self,
        *,
        from_ts: float | None = None,
        to_ts: float | None = None,
        reason: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[StoredDecision]:
        q = select(DecisionRow)
        if from_ts is not None:
            q = q.where(DecisionRow.created_ts >= from_ts)
        if to_ts is not None:
            q = q.where(DecisionRow.created_ts < to_ts)
        if reason:
            q = q.where(DecisionRow.reason == reason)
        q = q.order_by(DecisionRow.created_ts.desc(), DecisionRow.decision_id)
        q = q.limit(limit).offset(offset)
        with self.reading() as s:
            return [_decision(r) for r in s.scalars(q)]

    def decision_counts(self) -> dict[str, int]:
        with self.reading() as s:
            rows = s.execute(select(DecisionRow.reason, func.count()).group_by(DecisionRow.reason))
            return {r: int(n) for r, n in rows}


# --------------------------------------------------------------------------- row <-> record


def _fill_decision(row: DecisionRow, d: Decision) -> None:
    row.reason = str(d.reason)
    row.team = d.team
    row.job_ids = list(d.job_ids)
    row.chosen = str(d.chosen) if d.chosen is not None else ""
    row.alternatives = [
        {
            "offer": str(a.offer),
            "usd_per_hour": str(a.usd_per_hour),
            "expected_cost_usd": str(a.expected_cost_usd),
            "chosen": a.chosen,
            "rejected_because": a.rejected_because.value if a.rejected_because else "",
        }
        for a in d.alternatives
    ]
    row.predicted_wait_s = d.predicted_wait_s
    row.wait_budget_s = d.wait_budget_s
    row.wait_saved_s = d.wait_saved_s
    row.global_headroom_usd_hr = d.global_headroom_usd_hr
    row.team_headroom_usd = d.team_headroom_usd
    # The detail column also keeps what the decision is about (pool, node, instance), under
    # the keys rows have always had; they are read back into the typed fields.
    row.detail = {str(k): str(v) for k, v in {**d.about, **d.detail}.items()}


_ABOUT = ("pool", "node", "instance")


def _rejection(value: object) -> Rejection | None:
    """The stored verdict; none for the chosen offer, and for a verdict a newer planner wrote."""
    try:
        return Rejection(str(value)) if value else None
    except ValueError:
        return None


def _decision(r: DecisionRow) -> StoredDecision:
    try:
        reason = ReasonCode(r.reason)
    except ValueError:  # a reason code from a newer planner: keep the row readable
        reason = ReasonCode.WAIT_WITHIN_BUDGET
    alts = tuple(
        Alternative(
            offer=OfferKey.parse(a["offer"]),
            usd_per_hour=Decimal(a["usd_per_hour"]),
            expected_cost_usd=Decimal(a["expected_cost_usd"]),
            chosen=bool(a.get("chosen", False)),
            rejected_because=_rejection(a.get("rejected_because")),
        )
        for a in (r.alternatives or [])
    )
    d = Decision(
        decision_id=r.decision_id,
        reason=reason,
        job_ids=tuple(r.job_ids or ()),
        chosen=OfferKey.parse(r.chosen) if r.chosen else None,
        alternatives=alts,
        predicted_wait_s=r.predicted_wait_s,
        wait_budget_s=r.wait_budget_s,
        wait_saved_s=r.wait_saved_s,
        global_headroom_usd_hr=r.global_headroom_usd_hr,
        team_headroom_usd=r.team_headroom_usd,
        team=r.team,
        detail={k: v for k, v in (r.detail or {}).items() if k not in _ABOUT},
        pool=str((r.detail or {}).get("pool", "")),
        node=str((r.detail or {}).get("node", "")),
        instance=str((r.detail or {}).get("instance", "")),
    )
    return StoredDecision(d, r.created_ts, r.iac_review, r.iac_review_format, r.reason)
