"""Intents (written before each cloud call) and the instances they create, with each
instance's lifecycle history. The behaviour each method promises is written on its ports,
`provisioner.ports.store.IntentLog` and `InstanceRepo`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from provisioner.domain.failures import ErrorCategory
from provisioner.domain.instances import (
    DEFAULT_STATE_TIMEOUTS_S,
    CloudInstance,
    InstanceOrigin,
    InstanceState,
    Transition,
    check_history,
)
from provisioner.domain.intents import (
    IntentKind,
    IntentStatus,
    ScaleUpPayload,
    TerminatePayload,
    late_result,
)
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.records import Intent, NewIntent, StoredInstance
from provisioner.ports.store import InstanceRepo, IntentLog, NotFound, StoreError
from provisioner.store.engine import StoreBase
from provisioner.store.models import InstanceRow, InstanceTransitionRow, IntentRow


class InstanceStore(StoreBase, IntentLog, InstanceRepo):
    # ------------------------------------------------------------------ intents and instances

    def record_intent(self, intent: NewIntent) -> Intent:
        payload = intent.payload
        if isinstance(payload, ScaleUpPayload | TerminatePayload):
            payload = payload.to_json()
        token = intent.token
        if not token:
            raise StoreError("an intent needs an idempotency token")
        with self.fenced_transaction() as s:
            row = s.get(IntentRow, token)
            if row is None:
                row = IntentRow(
                    token=token,
                    kind=str(intent.kind),
                    status=str(IntentStatus.PENDING),
                    pool=intent.pool,
                    offer=intent.offer_text,
                    nodes=intent.nodes,
                    instance_id=intent.instance_id,
                    decision_id=intent.decision_id,
                    team=intent.team,
                    price_usd_hr=intent.price_usd_hr,
                    payload=dict(payload or {}),
                    created_ts=intent.now_ts,
                    error_code="",
                    error="",
                    result={},
                    error_category=None,
                )
                s.add(row)
            return _intent(row)

    def confirm(
        self,
        token: str,
        now_ts: float,
        *,
        instances: Sequence[CloudInstance] = (),
        transitions: Sequence[tuple[str, InstanceState, str]] = (),
        result: Mapping[str, Any] | None = None,
        category: ErrorCategory = ErrorCategory.NONE,
    ) -> Intent:
        with self.fenced_transaction() as s:
            row = s.get(IntentRow, token)
            if row is None:
                raise NotFound(f"no intent with token {token!r}")
            for inst in instances:
                if s.get(InstanceRow, inst.instance_id) is None:
                    s.add(_new_instance_row(inst, team=row.team, intent_token=token))
            for instance_id, to, reason in transitions:
                _transition(s, instance_id, to, now_ts, reason)
            if row.status != IntentStatus.CONFIRMED:
                row.status = str(IntentStatus.CONFIRMED)
                row.completed_ts = now_ts
                row.error_category = str(category)
                merged = dict(row.result or {})
                merged.update(result or {})
                if instances:
                    merged["instance_ids"] = sorted(
                        {*merged.get("instance_ids", []), *(i.instance_id for i in instances)}
                    )
                row.result = merged
            return _intent(row)

    def fail_intent(
        self,
        token: str,
        now_ts: float,
        error_code: str,
        error: str = "",
        *,
        category: ErrorCategory | None = None,
    ) -> Intent:
        with self.fenced_transaction() as s:
            row = s.get(IntentRow, token)
            if row is None:
                raise NotFound(f"no intent with token {token!r}")
            if row.status == IntentStatus.PENDING:
                row.status = str(IntentStatus.FAILED)
                row.completed_ts = now_ts
                row.error_code = error_code[:64]
                row.error = error[:2000]
                # No category: the column stays NULL, like a row written before it existed.
                row.error_category = str(category) if category is not None else None
            return _intent(row)

    def late_shortfall(
        self,
        token: str,
        now_ts: float,
        *,
        missing: int,
        code: str,
        error: str = "",
        category: ErrorCategory,
    ) -> Intent:
        with self.fenced_transaction() as s:
            row = s.get(IntentRow, token)
            if row is None:
                raise NotFound(f"no intent with token {token!r}")
            result = dict(row.result or {})
            if row.status == IntentStatus.CONFIRMED and not result.get("shortfall_code"):
                row.result = late_result(result, now_ts, missing, code)
                row.error_code = code[:64]
                row.error = error[:2000]
                row.error_category = str(category)
            return _intent(row)

    def intent(self, token: str) -> Intent | None:
        with self.reading() as s:
            row = s.get(IntentRow, token)
            return _intent(row) if row else None

    def pending_intents(self, kind: IntentKind | str | None = None) -> list[Intent]:
        q = select(IntentRow).where(IntentRow.status == str(IntentStatus.PENDING))
        if kind:
            q = q.where(IntentRow.kind == str(kind))
        with self.reading() as s:
            return [_intent(r) for r in s.scalars(q.order_by(IntentRow.created_ts))]

    def intents(
        self,
        *,
        kind: IntentKind | str | None = None,
        status: IntentStatus | str | None = None,
        since_ts: float | None = None,
        limit: int | None = None,
    ) -> list[Intent]:
        q = select(IntentRow)
        if kind:
            q = q.where(IntentRow.kind == str(kind))
        if status:
            q = q.where(IntentRow.status == str(status))
        if since_ts is not None:
            q = q.where(IntentRow.created_ts >= since_ts)
        q = q.order_by(IntentRow.created_ts, IntentRow.token)
        if limit is not None:
            q = q.limit(limit)
        with self.reading() as s:
            return [_intent(r) for r in s.scalars(q)]

    def first_intent_ts(self, kind: IntentKind | str) -> float | None:
        q = select(func.min(IntentRow.created_ts)).where(IntentRow.kind == str(kind))
        with self.reading() as s:
            value = s.scalar(q)
            return float(value) if value is not None else None

    def failed_intent_counts(self, kind: IntentKind | str = IntentKind.SCALE_UP) -> dict[str, int]:
        q = (
            select(IntentRow.error_code, func.count())
            .where(IntentRow.status == str(IntentStatus.FAILED), IntentRow.kind == str(kind))
            .group_by(IntentRow.error_code)
        )
        with self.reading() as s:
            return {code or "unknown": int(n) for code, n in s.execute(q)}

    def add_instance(
        self, inst: CloudInstance, *, team: str = "", intent_token: str = ""
    ) -> StoredInstance:
        with self.fenced_transaction() as s:
            row = s.get(InstanceRow, inst.instance_id)
            if row is None:
                row = _new_instance_row(inst, team=team, intent_token=intent_token)
                s.add(row)
                s.flush()
            return _stored_instance(row)

    def transition(
        self,
        instance_id: str,
        to: InstanceState,
        at_ts: float,
        reason: str,
        *,
        cloud_ts: float | None = None,
    ) -> CloudInstance:
        with self.fenced_transaction() as s:
            return _transition(s, instance_id, to, at_ts, reason, cloud_ts)

    def set_node_name(self, instance_id: str, node_name: str) -> None:
        with self.fenced_transaction() as s:
            row = s.get(InstanceRow, instance_id)
            if row is None:
                raise NotFound(f"no instance {instance_id!r}")
            row.node_name = node_name

    def instance(self, instance_id: str) -> StoredInstance | None:
        with self.reading() as s:
            row = s.get(InstanceRow, instance_id, options=[selectinload(InstanceRow.history)])
            return _stored_instance(row) if row else None

    def instances(
        self,
        *,
        states: Iterable[InstanceState | str] | None = None,
        pool: str | None = None,
        live_only: bool = False,
        needs_billing: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[StoredInstance]:
        q = select(InstanceRow).options(selectinload(InstanceRow.history))
        if states is not None:
            q = q.where(InstanceRow.state.in_([str(x) for x in states]))
        if live_only:
            q = q.where(InstanceRow.state.not_in([InstanceState.TERMINATED, InstanceState.FAILED]))
        if needs_billing:
            q = q.where(
                InstanceRow.state.not_in([InstanceState.TERMINATED, InstanceState.FAILED])
                | InstanceRow.billed_until_ts.is_(None)
                | InstanceRow.ended_ts.is_(None)
                | (InstanceRow.billed_until_ts < InstanceRow.ended_ts)
                # billed to its end while it still ran, but under the 60 s minimum: the
                # final pass still owes the rest of the minimum
                | ((InstanceRow.billed_seconds > 0) & (InstanceRow.billed_seconds < 60.0))
            )
        if pool:
            q = q.where(InstanceRow.pool == pool)
        q = q.order_by(InstanceRow.launched_ts, InstanceRow.instance_id).offset(offset)
        if limit is not None:
            q = q.limit(limit)
        with self.reading() as s:
            return [_stored_instance(r) for r in s.scalars(q)]

    def timed_out(
        self, now_ts: float, timeouts: Mapping[InstanceState, float] | None = None
    ) -> list[CloudInstance]:
        limits = dict(timeouts or DEFAULT_STATE_TIMEOUTS_S)
        return [
            si.instance
            for si in self.instances(states=limits.keys())
            if si.instance.timed_out(now_ts, limits)
        ]

    def instance_counts(self) -> dict[str, int]:
        with self.reading() as s:
            rows = s.execute(select(InstanceRow.state, func.count()).group_by(InstanceRow.state))
            return {st: int(n) for st, n in rows}

    def cloud_usd_per_hour(self) -> Decimal:
        total = Decimal(0)
        for si in self.instances(live_only=True):
            total += si.instance.price_usd_hr
        return total


# --------------------------------------------------------------------------- row <-> record


def _intent(r: IntentRow) -> Intent:
    return Intent(
        token=r.token,
        kind=IntentKind(r.kind),
        status=IntentStatus(r.status),
        created_ts=r.created_ts,
        pool=r.pool,
        offer=r.offer,
        nodes=r.nodes,
        instance_id=r.instance_id,
        decision_id=r.decision_id,
        team=r.team,
        price_usd_hr=r.price_usd_hr,
        payload=dict(r.payload or {}),
        completed_ts=r.completed_ts,
        error_code=r.error_code,
        error=r.error,
        result=dict(r.result or {}),
        error_category=ErrorCategory.parse(r.error_category),
    )


def _new_instance_row(inst: CloudInstance, *, team: str, intent_token: str) -> InstanceRow:
    row = InstanceRow(
        instance_id=inst.instance_id,
        pool=inst.pool,
        cloud=inst.offer.cloud,
        region=inst.offer.region,
        instance_type=inst.offer.instance_type,
        capacity=str(inst.offer.capacity),
        gpu_model=inst.gpu_model,
        gpus=inst.gpus,
        price_usd_hr=inst.price_usd_hr,
        state=str(inst.state),
        launched_ts=inst.launched_ts,
        entered_state_ts=inst.entered_state_ts,
        ended_ts=_ended_ts(inst),
        decision_id=inst.decision_id,
        node_name=inst.node_name,
        team=team,
        intent_token=intent_token,
        billed_until_ts=None,
        billed_seconds=0.0,
        origin=str(inst.origin),
    )
    steps = inst.history or (Transition(None, inst.state, inst.launched_ts, "recorded"),)
    check_history(inst.instance_id, steps)
    row.history = [
        InstanceTransitionRow(
            seq=i,
            from_state=str(t.from_state) if t.from_state is not None else None,
            to_state=str(t.to_state),
            at_ts=t.at_ts,
            reason=t.reason,
            cloud_ts=t.cloud_ts,
        )
        for i, t in enumerate(steps)
    ]
    return row


def _ended_ts(inst: CloudInstance) -> float | None:
    """When a record stored closed ended: its last step, at the cloud's stamp where given."""
    if not inst.state.terminal:
        return None
    return inst.history[-1].billed_ts if inst.history else inst.launched_ts


def _cloud_instance(r: InstanceRow) -> CloudInstance:
    history = tuple(
        Transition(
            InstanceState(t.from_state) if t.from_state is not None else None,
            InstanceState(t.to_state),
            t.at_ts,
            t.reason,
            t.cloud_ts,
        )
        for t in r.history
    )
    return CloudInstance(
        instance_id=r.instance_id,
        pool=r.pool,
        offer=OfferKey(r.cloud, r.region, r.instance_type, CapacityType(r.capacity)),
        gpu_model=r.gpu_model,
        gpus=r.gpus,
        price_usd_hr=r.price_usd_hr,
        state=InstanceState(r.state),
        launched_ts=r.launched_ts,
        decision_id=r.decision_id,
        node_name=r.node_name,
        history=history,
        origin=InstanceOrigin(r.origin or "planned"),
    )


def _stored_instance(r: InstanceRow) -> StoredInstance:
    return StoredInstance(
        instance=_cloud_instance(r),
        team=r.team,
        intent_token=r.intent_token,
        ended_ts=r.ended_ts,
        billed_until_ts=r.billed_until_ts,
        billed_seconds=r.billed_seconds or 0.0,
    )


def _transition(
    s: Session,
    instance_id: str,
    to: InstanceState,
    at_ts: float,
    reason: str,
    cloud_ts: float | None = None,
) -> CloudInstance:
    row = s.get(
        InstanceRow,
        instance_id,
        options=[selectinload(InstanceRow.history)],
        with_for_update=True,
    )
    if row is None:
        raise NotFound(f"no instance {instance_id!r}")
    current = _cloud_instance(row)
    # the domain's table decides, and refuses a step dated before the last one
    moved = current.transition(to, at_ts, reason, cloud_ts=cloud_ts)
    if moved is current:
        return current
    step = moved.history[-1]
    row.state = str(moved.state)
    row.entered_state_ts = at_ts
    if moved.state.terminal and row.ended_ts is None:
        row.ended_ts = step.billed_ts
    row.history.append(
        InstanceTransitionRow(
            seq=len(row.history),
            from_state=str(step.from_state) if step.from_state is not None else None,
            to_state=str(step.to_state),
            at_ts=step.at_ts,
            reason=step.reason,
            cloud_ts=step.cloud_ts,
        )
    )
    return moved
