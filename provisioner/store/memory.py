"""In-memory repositories: plain dicts and lists behind the store's Protocols
(`provisioner.ports.store`), for tests and tools that want a store without a database.

They keep what callers of the SQL store can observe: the same ordering, filters, defaults,
normalisation (amounts to the micro-dollar, decision details as text) and errors, and
all-or-nothing writes (a batch is checked and staged before anything is kept). The contract
suite (`tests/contract/test_store_contract.py`) runs the same tests against these and the SQL
store. What they do not have: a fence (no write is ever `FencedOut`), durability, and safety
across threads or processes; each class's docstring names its other differences.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from provisioner.domain.errors import InvalidArgument
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
)
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import Decision, ReasonCode
from provisioner.domain.records import (
    BillingMark,
    Intent,
    JobUsage,
    LedgerEntry,
    LedgerKind,
    NewIntent,
    StoredDecision,
    StoredInstance,
    TokenRecord,
    day_of,
    from_micros,
    to_micros,
)
from provisioner.store.ledger import EXPORT_COLUMNS, MAX_ENTRY_MICROS
from provisioner.store.models import LEDGER_DIMENSIONS
from provisioner.store.records import ConcurrentUpdate, NotFound, StoreError

# The keys `grouped_costs` groups by (the SQL store's rollup columns).
GROUP_KEYS = ("day", *LEDGER_DIMENSIONS)


class MemoryDecisionLog:
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


class MemoryTokenRepo:
    """`TokenRepo` over a dict."""

    def __init__(self) -> None:
        self._tokens: dict[str, TokenRecord] = {}

    def add_token(self, rec: TokenRecord) -> None:
        if rec.token_id in self._tokens:
            raise StoreError(f"token {rec.token_id!r} exists")
        self._tokens[rec.token_id] = rec

    def token(self, token_id: str) -> TokenRecord | None:
        return self._tokens.get(token_id)

    def tokens(self) -> list[TokenRecord]:
        return sorted(self._tokens.values(), key=lambda t: (t.created_ts, t.token_id))

    def revoke_token(self, token_id: str, now_ts: float) -> bool:
        rec = self._tokens.get(token_id)
        if rec is None:
            return False
        if rec.revoked_ts is None:
            self._tokens[token_id] = replace(rec, revoked_ts=now_ts)
        return True


class MemoryLedger:
    """`Ledger` over a dict of usage records and a list of ledger rows (in insertion order).

    The instances whose billing watermarks `commit_billing` moves belong to the instance
    repository in the SQL store; here the ledger keeps them itself: `track_instance` adds one
    (unbilled), `instance_billing` reads its (billed until, billed seconds).

    Differences from SQL: an entry whose kind is not a `LedgerKind` is refused on write with
    `StoreError` (the SQL store keeps it and fails when reading it back); `grouped_costs` refuses
    a key outside `GROUP_KEYS` with `ValueError` whatever the window (the SQL store only when the
    window holds a whole UTC day; otherwise it groups by any ledger column); `ledger_export`
    yields lists of plain tuples, not SQLAlchemy rows. There are no rollups to rebuild."""

    def __init__(self) -> None:
        self._usage: dict[int, JobUsage] = {}
        self._usage_ids: dict[tuple[str, str, float], int] = {}
        self._next_usage_id = itertools.count(1)
        self._rows: list[LedgerEntry] = []
        self._instances: dict[str, tuple[float | None, float]] = {}

    # ------------------------------------------------------------------ instances billed

    def track_instance(self, instance_id: str) -> None:
        """An instance the ledger may bill, not billed yet (kept as it is if known)."""
        self._instances.setdefault(instance_id, (None, 0.0))

    def instance_billing(self, instance_id: str) -> tuple[float | None, float]:
        """(billed until, billed seconds) of a tracked instance; `NotFound` otherwise."""
        try:
            return self._instances[instance_id]
        except KeyError:
            raise NotFound(f"no instance {instance_id!r}") from None

    # ------------------------------------------------------------------ job usage

    def record_job_usage(self, usages: Iterable[JobUsage]) -> int:
        given = list(usages)
        for u in given:
            key = (u.job_id, u.node_name, u.start_ts)
            usage_id = self._usage_ids.get(key)
            if usage_id is None:
                usage_id = self._usage_ids[key] = next(self._next_usage_id)
                self._usage[usage_id] = replace(u, usage_id=usage_id, billed_until_ts=None)
            else:  # the id and the watermark stay
                old = self._usage[usage_id]
                self._usage[usage_id] = replace(
                    u, usage_id=usage_id, billed_until_ts=old.billed_until_ts
                )
        return len(given)

    def end_job(self, job_id: str, end_ts: float) -> int:
        open_ids = [i for i, u in self._usage.items() if u.job_id == job_id and u.end_ts is None]
        for i in open_ids:
            self._usage[i] = replace(self._usage[i], end_ts=end_ts)
        return len(open_ids)

    def job_usage(
        self,
        *,
        node_name: str | None = None,
        instance_id: str | None = None,
        onprem_only: bool = False,
        overlapping: tuple[float, float] | None = None,
        unbilled_at: float | None = None,
    ) -> list[JobUsage]:
        def keep(u: JobUsage) -> bool:
            if node_name is not None and u.node_name != node_name:
                return False
            if instance_id is not None and u.instance_id != instance_id:
                return False
            if onprem_only and u.instance_id != "":
                return False
            if overlapping is not None:
                a, b = overlapping
                if not (u.start_ts < b and (u.end_ts is None or u.end_ts > a)):
                    return False
            if unbilled_at is not None:
                billed, end = u.billed_until_ts, u.end_ts
                if not (
                    u.start_ts < unbilled_at and (billed is None or end is None or billed < end)
                ):
                    return False
            return True

        found = [u for u in self._usage.values() if keep(u)]
        return sorted(found, key=lambda u: (u.start_ts, u.usage_id or 0))

    # ------------------------------------------------------------------ ledger

    def add_ledger(self, entries: Iterable[LedgerEntry]) -> int:
        rows = [_checked(e) for e in entries]
        self._rows.extend(rows)
        return len(rows)

    def commit_billing(
        self,
        entries: Sequence[LedgerEntry],
        *,
        instance_marks: Sequence[BillingMark] = (),
        usage_marks: Sequence[BillingMark] = (),
    ) -> int:
        # Staged on copies, in the SQL store's order (instances, usage, rows): a mark or an
        # entry that fails leaves everything as it was.
        instances = dict(self._instances)
        for m in instance_marks:
            key = str(m.key)
            if key not in instances:
                raise NotFound(f"no instance {m.key!r}")
            until, seconds = instances[key]
            if until != m.expected:
                raise ConcurrentUpdate(f"instance {m.key}: billed_until moved")
            instances[key] = (m.until, seconds + m.add_seconds)
        usage = dict(self._usage)
        for m in usage_marks:
            u = usage.get(int(m.key))
            if u is None:
                raise NotFound(f"no job usage {m.key!r}")
            if u.billed_until_ts != m.expected:
                raise ConcurrentUpdate(f"job usage {m.key}: billed_until moved")
            usage[int(m.key)] = replace(u, billed_until_ts=m.until)
        rows = [_checked(e) for e in entries]
        self._instances, self._usage = instances, usage
        self._rows.extend(rows)
        return len(rows)

    def ledger_total(self, from_ts: float | None = None, to_ts: float | None = None) -> Decimal:
        return from_micros(sum(to_micros(e.cost) for e in self._window(from_ts, to_ts)))

    def grouped_costs(
        self, group_by: Sequence[str], from_ts: float, to_ts: float, kinds: Sequence[str] = ()
    ) -> dict[tuple[str, ...], tuple[Decimal, int]]:
        bad = [k for k in group_by if k not in GROUP_KEYS]
        if bad:
            raise InvalidArgument(f"cannot group the ledger by {bad}")
        wanted = {str(k) for k in kinds}
        totals: dict[tuple[str, ...], list[int]] = {}
        for e in self._window(from_ts, to_ts):
            if wanted and str(e.kind) not in wanted:
                continue
            acc = totals.setdefault(tuple(_text(e, k) for k in group_by), [0, 0])
            acc[0] += to_micros(e.cost)
            acc[1] += 1
        return {k: (from_micros(c), n) for k, (c, n) in totals.items()}

    def spend_by_team(
        self, from_ts: float, to_ts: float, kinds: Sequence[str]
    ) -> dict[str, Decimal]:
        first, last = day_of(from_ts), day_of(to_ts)
        wanted = {str(k) for k in kinds}
        spent: dict[str, int] = {}
        for e in self._rows:
            if first <= e.day < last and str(e.kind) in wanted:
                spent[e.team] = spent.get(e.team, 0) + to_micros(e.cost)
        return {team: from_micros(c) for team, c in spent.items()}

    def instance_costs(
        self, from_ts: float, to_ts: float, kinds: Sequence[str]
    ) -> dict[str, tuple[Decimal, Decimal]]:
        wanted = {str(k) for k in kinds}
        totals: dict[str, list[int]] = {}
        for e in self._rows:
            if e.instance_id and from_ts <= e.start_ts < to_ts and str(e.kind) in wanted:
                t = totals.setdefault(e.instance_id, [0, 0])
                t[0] += to_micros(e.cost)
                if e.kind is LedgerKind.JOB:
                    t[1] += to_micros(e.cost)
        return {iid: (from_micros(a), from_micros(b)) for iid, (a, b) in totals.items()}

    def ledger_export(
        self, from_ts: float | None = None, to_ts: float | None = None, *, chunk_rows: int = 2000
    ) -> Iterator[Sequence[Sequence[Any]]]:
        rows = [tuple(_column(e, c) for c in EXPORT_COLUMNS) for e in self._window(from_ts, to_ts)]
        for start in range(0, len(rows), chunk_rows):
            yield rows[start : start + chunk_rows]

    def ledger_entries(
        self, *, instance_id: str | None = None, job_id: str | None = None
    ) -> list[LedgerEntry]:
        return [
            e
            for e in self._sorted(self._rows)
            if (instance_id is None or e.instance_id == instance_id)
            and (job_id is None or e.job_id == job_id)
        ]

    def _window(self, from_ts: float | None, to_ts: float | None) -> list[LedgerEntry]:
        """Rows starting in [from_ts, to_ts), in start order, then insertion order."""
        return self._sorted(
            e
            for e in self._rows
            if (from_ts is None or e.start_ts >= from_ts) and (to_ts is None or e.start_ts < to_ts)
        )

    @staticmethod
    def _sorted(rows: Iterable[LedgerEntry]) -> list[LedgerEntry]:
        return sorted(rows, key=lambda e: e.start_ts)  # stable: ties keep insertion order


def _checked(e: LedgerEntry) -> LedgerEntry:
    """The entry as the SQL store keeps it, or `StoreError` for one it refuses."""
    if e.end_ts < e.start_ts:
        raise StoreError(f"ledger entry ends before it starts ({e.start_ts}, {e.end_ts})")
    if day_of(e.start_ts) != day_of(max(e.start_ts, e.end_ts - 1e-6)):
        raise StoreError("a ledger entry must not straddle a UTC midnight")
    micros, unit_micros = to_micros(e.cost), to_micros(e.unit_price)
    if abs(micros) > MAX_ENTRY_MICROS or abs(unit_micros) > MAX_ENTRY_MICROS:
        raise StoreError(
            f"ledger entry {e.kind} {e.node_name or e.instance_id} costs {e.cost} "
            f"(unit price {e.unit_price}): over the ${MAX_ENTRY_MICROS // 10**6:,} a row may hold"
        )
    try:
        kind = LedgerKind(str(e.kind))
    except ValueError:
        raise StoreError(f"ledger entry of unknown kind {e.kind!r}") from None
    return replace(
        e,
        kind=kind,
        cost=from_micros(micros),
        unit_price=from_micros(unit_micros),
        quantity=float(e.quantity),
    )


def _text(e: LedgerEntry, key: str) -> str:
    return e.day if key == "day" else str(getattr(e, key))


def _column(e: LedgerEntry, column: str) -> Any:
    """One value of an export row, as the SQL store's column holds it."""
    if column == "day":
        return e.day
    if column == "kind":
        return e.kind.value
    if column == "cost_micros":
        return to_micros(e.cost)
    if column == "unit_price_micros":
        return to_micros(e.unit_price)
    return getattr(e, column)


@dataclass(frozen=True, slots=True)
class _InstanceRecord:
    """One stored instance, less its billing watermarks (those the ledger keeps)."""

    instance: CloudInstance
    team: str
    intent_token: str
    ended_ts: float | None


class MemoryInstances:
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
                payload=_json_copy(dict(payload or {})),
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
                result=_json_copy(merged),
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


def _json_copy(value: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy as a JSON column reads it back (tuples become lists, keys text)."""
    try:
        copied: dict[str, Any] = json.loads(json.dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"not JSON: {exc}") from None
    return copied


def _intent_copy(row: Intent) -> Intent:
    """A copy whose payload and result (the mutable parts) the caller may change freely."""
    return replace(row, payload=_json_copy(row.payload), result=_json_copy(row.result))


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


if TYPE_CHECKING:
    from provisioner.ports.store import DecisionLog, InstanceRepo, IntentLog, Ledger, TokenRepo

    def _memory_satisfies_its_port() -> None:
        # mypy fails here, naming the member, the day a class stops matching its Protocol.
        decisions: DecisionLog = MemoryDecisionLog()
        tokens: TokenRepo = MemoryTokenRepo()
        ledger: Ledger = MemoryLedger()
        del decisions, tokens, ledger

    def _memory_instances_satisfy_their_ports() -> None:
        both = MemoryInstances()
        intents: IntentLog = both
        instances: InstanceRepo = both
        del intents, instances
