"""`IntentLog` and `InstanceRepo` in memory: intents and instances over two dicts, the
instances' billing watermarks kept by a `MemoryLedger`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

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
from provisioner.store.memory.common import json_copy
from provisioner.store.memory.ledger import MemoryLedger


@dataclass(frozen=True, slots=True)
class _InstanceRecord:
    """One stored instance, less its billing watermarks (those the ledger keeps)."""

    instance: CloudInstance
    team: str
    intent_token: str
    ended_ts: float | None


class MemoryInstances(IntentLog, InstanceRepo):
    """`IntentLog` and `InstanceRepo` in one class over two dicts, since the two share state as
    the SQL store's tables do: `confirm` stores the instances an intent created (with the
    intent's team and token) and moves instances along the lifecycle.

    The billing watermarks of an instance (`billed_until_ts`, `billed_seconds`) live on its row
    in the SQL store; here the `MemoryLedger` given (or a private one, `self.ledger`) keeps them:
    every instance stored is tracked there (`track_instance`), and the records this class hands
    out, and the `needs_billing` filter, read the watermarks from it, so `commit_billing` on
    that ledger moves what `instance()` / `instances()` show.

    Differences from SQL: no fence (no write is ever `FencedOut`), no durability, no safety
    across threads or processes. Ties in `pending_intents` (same `created_ts`) come by token
    (the SQL store leaves their order to the engine). `limit` and `offset` are list
    slicing, so a negative one means what it means for a Python slice. Lengths are not checked
    (SQLite does not either; PostgreSQL refuses a value longer than its column), except the
    cuts the SQL store makes itself (`error_code` to 64 characters, `error` to 2,000). A
    payload or result that is not JSON is refused with `StoreError` (the SQL store raises the
    driver's error). The same instance id twice in one `confirm` is stored once, the first."""

    def __init__(self, ledger: MemoryLedger | None = None) -> None:
        self.ledger = ledger if ledger is not None else MemoryLedger()
        self._intents: dict[str, Intent] = {}
        self._instances: dict[str, _InstanceRecord] = {}

    # ------------------------------------------------------------------ IntentLog

    def record_intent(self, intent: NewIntent) -> Intent:
        payload = intent.payload
        if isinstance(payload, ScaleUpPayload | TerminatePayload):
            payload = payload.to_json()
        token, price = intent.token, intent.price_usd_hr
        if not token:
            raise StoreError("an intent needs an idempotency token")
        row = self._intents.get(token)
        if row is None:
            row = Intent(
                token=token,
                kind=intent.kind,  # NewIntent made it an IntentKind
                status=IntentStatus.PENDING,
                created_ts=intent.now_ts,
                pool=intent.pool,
                offer=intent.offer_text,
                nodes=intent.nodes,
                instance_id=intent.instance_id,
                decision_id=intent.decision_id,
                team=intent.team,
                price_usd_hr=Decimal(price) if price is not None else None,
                payload=json_copy(dict(payload or {})),
                result={},
                error_category=None,
            )
            self._intents[token] = row
        return _intent_copy(row)

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
        row = self._intents.get(token)
        if row is None:
            raise NotFound(f"no intent with token {token!r}")
        # Staged on a copy, in the SQL store's order (instances, steps, intent): a step that
        # fails leaves everything as it was.
        staged = dict(self._instances)
        added: list[str] = []
        for inst in instances:
            if inst.instance_id not in staged:
                staged[inst.instance_id] = _new_record(inst, team=row.team, intent_token=token)
                added.append(inst.instance_id)
        for instance_id, to, reason in transitions:
            staged[instance_id] = _moved(staged.get(instance_id), instance_id, to, now_ts, reason)
        if row.status != IntentStatus.CONFIRMED:
            merged = dict(row.result)
            merged.update(result or {})
            if instances:
                merged["instance_ids"] = sorted(
                    {*merged.get("instance_ids", []), *(i.instance_id for i in instances)}
                )
            row = replace(
                row,
                status=IntentStatus.CONFIRMED,
                completed_ts=now_ts,
                error_category=ErrorCategory.parse(str(category)),
                result=json_copy(merged),
            )
        self._instances = staged
        self._intents[token] = row
        for instance_id in added:
            self.ledger.track_instance(instance_id)
        return _intent_copy(row)

    def fail_intent(
        self,
        token: str,
        now_ts: float,
        error_code: str,
        error: str = "",
        *,
        category: ErrorCategory | None = None,
    ) -> Intent:
        row = self._intents.get(token)
        if row is None:
            raise NotFound(f"no intent with token {token!r}")
        if row.status == IntentStatus.PENDING:
            row = self._intents[token] = replace(
                row,
                status=IntentStatus.FAILED,
                completed_ts=now_ts,
                error_code=error_code[:64],
                error=error[:2000],
                error_category=ErrorCategory.parse(str(category)) if category is not None else None,
            )
        return _intent_copy(row)

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
        row = self._intents.get(token)
        if row is None:
            raise NotFound(f"no intent with token {token!r}")
        if row.status == IntentStatus.CONFIRMED and not row.result.get("shortfall_code"):
            row = self._intents[token] = replace(
                row,
                result=json_copy(late_result(dict(row.result), now_ts, missing, code)),
                error_code=code[:64],
                error=error[:2000],
                error_category=ErrorCategory.parse(str(category)),
            )
        return _intent_copy(row)

    def intent(self, token: str) -> Intent | None:
        row = self._intents.get(token)
        return _intent_copy(row) if row is not None else None

    def pending_intents(self, kind: IntentKind | str | None = None) -> list[Intent]:
        return self.intents(kind=kind, status=IntentStatus.PENDING)

    def first_intent_ts(self, kind: IntentKind | str) -> float | None:
        times = [r.created_ts for r in self._intents.values() if r.kind == str(kind)]
        return min(times) if times else None

    def intents(
        self,
        *,
        kind: IntentKind | str | None = None,
        status: IntentStatus | str | None = None,
        since_ts: float | None = None,
        limit: int | None = None,
    ) -> list[Intent]:
        rows = sorted(
            (
                r
                for r in self._intents.values()
                if (not kind or r.kind == str(kind))
                and (not status or r.status == str(status))
                and (since_ts is None or r.created_ts >= since_ts)
            ),
            key=lambda r: (r.created_ts, r.token),
        )
        if limit is not None:
            rows = rows[:limit]
        return [_intent_copy(r) for r in rows]

    def failed_intent_counts(self, kind: IntentKind | str = IntentKind.SCALE_UP) -> dict[str, int]:
        return dict(
            Counter(
                r.error_code or "unknown"
                for r in self._intents.values()
                if r.status == IntentStatus.FAILED and r.kind == str(kind)
            )
        )

    # ------------------------------------------------------------------ InstanceRepo

    def add_instance(
        self, inst: CloudInstance, *, team: str = "", intent_token: str = ""
    ) -> StoredInstance:
        rec = self._instances.get(inst.instance_id)
        if rec is None:
            rec = _new_record(inst, team=team, intent_token=intent_token)
            self._instances[inst.instance_id] = rec
            self.ledger.track_instance(inst.instance_id)
        return self._stored(rec)

    def transition(
        self,
        instance_id: str,
        to: InstanceState,
        at_ts: float,
        reason: str,
        *,
        cloud_ts: float | None = None,
    ) -> CloudInstance:
        rec = _moved(self._instances.get(instance_id), instance_id, to, at_ts, reason, cloud_ts)
        self._instances[instance_id] = rec
        return rec.instance

    def set_node_name(self, instance_id: str, node_name: str) -> None:
        rec = self._instances.get(instance_id)
        if rec is None:
            raise NotFound(f"no instance {instance_id!r}")
        self._instances[instance_id] = replace(
            rec, instance=replace(rec.instance, node_name=node_name)
        )

    def instance(self, instance_id: str) -> StoredInstance | None:
        rec = self._instances.get(instance_id)
        return self._stored(rec) if rec is not None else None

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
        wanted = {str(x) for x in states} if states is not None else None
        found = []
        for rec in self._instances.values():
            si = self._stored(rec)
            inst = si.instance
            if wanted is not None and str(inst.state) not in wanted:
                continue
            if live_only and inst.state.terminal:
                continue
            if needs_billing and not _needs_billing(si):
                continue
            if pool and inst.pool != pool:
                continue
            found.append(si)
        found.sort(key=lambda si: (si.instance.launched_ts, si.instance.instance_id))
        found = found[offset:]
        return found[:limit] if limit is not None else found

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
        return dict(Counter(str(r.instance.state) for r in self._instances.values()))

    def cloud_usd_per_hour(self) -> Decimal:
        total = Decimal(0)
        for si in self.instances(live_only=True):
            total += si.instance.price_usd_hr
        return total

    def _stored(self, rec: _InstanceRecord) -> StoredInstance:
        billed_until, billed_seconds = self.ledger.instance_billing(rec.instance.instance_id)
        return StoredInstance(
            instance=rec.instance,
            team=rec.team,
            intent_token=rec.intent_token,
            ended_ts=rec.ended_ts,
            billed_until_ts=billed_until,
            billed_seconds=billed_seconds,
        )


def _intent_copy(row: Intent) -> Intent:
    """A copy whose payload and result (the mutable parts) the caller may change freely."""
    return replace(row, payload=json_copy(row.payload), result=json_copy(row.result))


def _new_record(inst: CloudInstance, *, team: str, intent_token: str) -> _InstanceRecord:
    """The instance as the SQL store keeps a new row of it: its history, or one 'recorded'
    step; ended when it is stored in a terminal state."""
    steps = inst.history or (Transition(None, inst.state, inst.launched_ts, "recorded"),)
    check_history(inst.instance_id, steps)
    offer = inst.offer
    kept = replace(
        inst,
        offer=OfferKey(
            offer.cloud, offer.region, offer.instance_type, CapacityType(offer.capacity)
        ),
        price_usd_hr=Decimal(inst.price_usd_hr),
        state=InstanceState(inst.state),
        history=tuple(
            Transition(
                InstanceState(t.from_state) if t.from_state is not None else None,
                InstanceState(t.to_state),
                t.at_ts,
                t.reason,
                t.cloud_ts,
            )
            for t in steps
        ),
        origin=InstanceOrigin(inst.origin or "planned"),
    )
    return _InstanceRecord(
        instance=kept,
        team=team,
        intent_token=intent_token,
        ended_ts=kept.history[-1].billed_ts if kept.state.terminal else None,
    )


def _moved(
    rec: _InstanceRecord | None,
    instance_id: str,
    to: InstanceState,
    at_ts: float,
    reason: str,
    cloud_ts: float | None = None,
) -> _InstanceRecord:
    """The record one lifecycle step on (the domain's table decides), or `NotFound`."""
    if rec is None:
        raise NotFound(f"no instance {instance_id!r}")
    moved = rec.instance.transition(to, at_ts, reason, cloud_ts=cloud_ts)
    if moved is rec.instance:
        return rec
    ended = rec.ended_ts
    if moved.state.terminal and ended is None:
        ended = moved.history[-1].billed_ts
    return replace(rec, instance=moved, ended_ts=ended)


def _needs_billing(si: StoredInstance) -> bool:
    """The accountant's work list, as the SQL store's filter: alive, or not billed to its end,
    or billed to it for less than the 60 s minimum."""
    until, ended = si.billed_until_ts, si.ended_ts
    return (
        not si.instance.state.terminal
        or until is None
        or ended is None
        or until < ended
        or 0 < si.billed_seconds < 60.0
    )
