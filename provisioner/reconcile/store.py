"""The controller's store: SQLAlchemy 2 over SQLite (WAL, the default) or PostgreSQL (by URL).

The store is a cache of the world plus what only the controller knows: its intents, decisions,
the ledger and the operator's switches. Every method that writes more than one row does so in one
transaction, so a crash leaves either all of it or none of it.

Intent first: `record_intent` before a cloud call (with the idempotency token the call carries),
`confirm` or `fail_intent` after. After a restart `pending_intents()` lists what may or may not
have happened; the loop finds out from the cloud (by tag/token) and confirms or fails each one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    create_engine,
    event,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, selectinload, sessionmaker
from sqlalchemy.pool import StaticPool

from provisioner.config.models import Budgets, PoolPolicy
from provisioner.domain.instances import (
    DEFAULT_STATE_TIMEOUTS_S,
    CloudInstance,
    InstanceState,
    Transition,
)
from provisioner.domain.nodes import GpuSample
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import Alternative, Decision, ReasonCode
from provisioner.reconcile import migrations
from provisioner.reconcile.models import (
    GRAINS,
    LEDGER_DIMENSIONS,
    ApiTokenRow,
    BudgetRow,
    DecisionRow,
    EnergyMarkRow,
    InstanceRow,
    InstanceTransitionRow,
    IntentRow,
    JobUsageRow,
    LedgerRow,
    OperatorStateRow,
    PoolRow,
    RollupRow,
    TelemetryPayloadRow,
    TelemetryRow,
)

DEFAULT_URL = "sqlite:///provisioner.sqlite"
MICRO = Decimal("0.000001")


class StoreError(Exception):
    """A store operation could not be carried out as asked."""


class NotFound(StoreError):
    pass


class ConcurrentUpdate(StoreError):
    """Someone else moved a watermark since it was read; nothing was written."""


def to_micros(amount: Decimal) -> int:
    return int(amount.quantize(MICRO).scaleb(6))


def from_micros(micros: int) -> Decimal:
    return Decimal(int(micros)).scaleb(-6).quantize(MICRO)


def _table(cls: type[Any]) -> Table:
    return cast(Table, cls.__table__)


def day_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class PoolInfo:
    name: str
    cloud: str
    regions: tuple[str, ...] = ()
    partition: str = ""
    team: str = ""
    gpu_model: str = ""
    capacity: str = "any"
    max_nodes: int = 0
    drained: bool = False
    drained_ts: float | None = None
    drained_by: str = ""


@dataclass(frozen=True, slots=True)
class OperatorState:
    paused: bool = False
    reason: str = ""
    updated_ts: float = 0.0
    updated_by: str = ""
    drained_pools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Intent:
    token: str
    kind: str
    status: str
    created_ts: float
    pool: str = ""
    offer: str = ""
    nodes: int = 0
    instance_id: str = ""
    decision_id: str = ""
    team: str = ""
    price_usd_hr: Decimal | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)
    completed_ts: float | None = None
    error_code: str = ""
    error: str = ""
    result: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoredInstance:
    instance: CloudInstance
    team: str = ""
    intent_token: str = ""
    ended_ts: float | None = None
    billed_until_ts: float | None = None
    billed_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class StoredDecision:
    decision: Decision
    created_ts: float
    iac_review: str | None = None
    iac_review_format: str = ""
    reason: str = ""  # the stored code, kept verbatim even if this version does not know it


@dataclass(frozen=True, slots=True)
class JobUsage:
    """A job's time on one node (`end_ts` None while it runs). `instance_id` '' means on-prem."""

    job_id: str
    node_name: str
    gpus: int
    start_ts: float
    end_ts: float | None = None
    instance_id: str = ""
    pool: str = ""
    account: str = ""
    team: str = ""
    partition: str = ""
    user: str = ""
    usage_id: int | None = None
    billed_until_ts: float | None = None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One priced slice of time. `cost` is Decimal dollars, kept to the micro-dollar."""

    start_ts: float
    end_ts: float
    kind: str  # job | idle | onprem | energy
    cost: Decimal
    cloud: str = ""
    region: str = ""
    pool: str = ""
    instance_id: str = ""
    node_name: str = ""
    offer: str = ""
    instance_type: str = ""
    capacity: str = ""
    job_id: str = ""
    team: str = ""
    account: str = ""
    user: str = ""
    partition: str = ""
    decision_id: str = ""
    gpus: int = 0
    quantity: float = 0.0
    unit: str = ""
    unit_price: Decimal = Decimal(0)

    @property
    def day(self) -> str:
        return day_of(self.start_ts)


@dataclass(frozen=True, slots=True)
class BudgetRecord:
    scope: str  # team | global
    name: str
    monthly_usd: Decimal | None = None
    usd_per_hour: Decimal | None = None


@dataclass(frozen=True, slots=True)
class TokenRecord:
    token_id: str
    name: str
    role: str
    salt: str
    secret_hash: str
    created_ts: float
    revoked_ts: float | None = None


@dataclass(frozen=True, slots=True)
class NodeTelemetry:
    node: str
    received_ts: float
    gpus: tuple[GpuSample, ...]


@dataclass(frozen=True, slots=True)
class StoredPayload:
    """A node's latest whole agent payload (JSON, `GpuTelemetry` schema) and, per GPU index,
    since when that GPU has been idle."""

    node: str
    sampled_ts: float
    received_ts: float
    payload: Mapping[str, Any]
    idle_since: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EnergyMark:
    """The last sample of one GPU whose energy is in the ledger."""

    node: str
    gpu_key: str
    sampled_ts: float
    energy_mj: float | None = None
    power_w: float | None = None


@dataclass(frozen=True, slots=True)
class BillingMark:
    """Move an accounting watermark from `expected` (what was read) to `until`."""

    key: str | int  # instance id (str) or job usage id (int)
    expected: float | None
    until: float
    add_seconds: float = 0.0


# --------------------------------------------------------------------------- engine


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """An engine for `url`. SQLite files get WAL, foreign keys and a busy timeout; in-memory
    SQLite shares one connection so every session sees the same database."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return create_engine(url, echo=echo, pool_pre_ping=True)
    memory = u.database in (None, "", ":memory:")
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if memory:
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, echo=echo, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (see _on_begin).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front so a read-then-write never fails half-way.
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


# --------------------------------------------------------------------------- store


class Store:
    """All reads and writes of the controller's database."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        migrate: bool = True,
        echo: bool = False,
        engine: Engine | None = None,
    ) -> None:
        self.engine = engine or make_engine(url, echo=echo)
        self.dialect = self.engine.dialect.name
        writer = self.engine.execution_options(sqlite_immediate=True)
        self._write = sessionmaker(writer, expire_on_commit=False)
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        if migrate:
            self.migrate()

    def migrate(self) -> None:
        migrations.upgrade(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One write transaction: committed on success, rolled back on any exception."""
        with self._write.begin() as session:
            yield session

    @contextmanager
    def reading(self) -> Iterator[Session]:
        with self._read() as session:
            yield session

    # ------------------------------------------------------------------ pools and operator

    def sync_pools(self, pools: Iterable[PoolPolicy], now_ts: float) -> None:
        """Upsert the pools declared in policy; the operator's drain flag is kept."""
        with self.transaction() as s:
            for p in pools:
                row = s.get(PoolRow, p.name)
                if row is None:
                    row = PoolRow(name=p.name, drained=False, drained_by="")
                    s.add(row)
                row.cloud = p.cloud
                row.regions = list(p.regions)
                row.partition = p.partition
                row.team = p.team
                row.gpu_model = p.gpu_model or ""
                row.capacity = p.capacity
                row.max_nodes = p.max_nodes
                row.updated_ts = now_ts

    def pools(self) -> list[PoolInfo]:
        with self.reading() as s:
            return [_pool(r) for r in s.scalars(select(PoolRow).order_by(PoolRow.name))]

    def pool(self, name: str) -> PoolInfo | None:
        with self.reading() as s:
            row = s.get(PoolRow, name)
            return _pool(row) if row else None

    def set_pool_drained(
        self, name: str, drained: bool, now_ts: float, by: str = ""
    ) -> PoolInfo | None:
        """Drain (or undrain) a pool: no new scale-ups, its nodes drained. None: no such pool."""
        with self.transaction() as s:
            row = s.get(PoolRow, name)
            if row is None:
                return None
            row.drained = drained
            row.drained_ts = now_ts if drained else None
            row.drained_by = by if drained else ""
            row.updated_ts = now_ts
            return _pool(row)

    def operator_state(self) -> OperatorState:
        with self.reading() as s:
            row = s.get(OperatorStateRow, 1)
            drained = tuple(s.scalars(select(PoolRow.name).where(PoolRow.drained.is_(True))))
            if row is None:
                return OperatorState(drained_pools=drained)
            return OperatorState(row.paused, row.reason, row.updated_ts, row.updated_by, drained)

    def set_paused(self, paused: bool, now_ts: float, by: str = "", reason: str = "") -> None:
        with self.transaction() as s:
            row = s.get(OperatorStateRow, 1)
            if row is None:
                row = OperatorStateRow(id=1)
                s.add(row)
            row.paused = paused
            row.reason = reason[:500]
            row.updated_ts = now_ts
            row.updated_by = by

    # ------------------------------------------------------------------ decisions

    def record_decisions(self, decisions: Iterable[Decision], created_ts: float) -> int:
        """Store decisions; ids are deterministic, so recording one twice keeps one row."""
        n = 0
        with self.transaction() as s:
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
        """Attach the IaC review (preview text or JSON) to a decision. False: no such decision."""
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

    # ------------------------------------------------------------------ intents and instances

    def record_intent(
        self,
        kind: str,
        token: str,
        now_ts: float,
        *,
        pool: str = "",
        offer: OfferKey | str | None = None,
        nodes: int = 0,
        instance_id: str = "",
        decision_id: str = "",
        team: str = "",
        price_usd_hr: Decimal | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> Intent:
        """Write what is about to be asked of the cloud. Idempotent per token: recording the
        same token again returns the intent already stored."""
        if not token:
            raise StoreError("an intent needs an idempotency token")
        with self.transaction() as s:
            row = s.get(IntentRow, token)
            if row is None:
                row = IntentRow(
                    token=token,
                    kind=kind,
                    status="pending",
                    pool=pool,
                    offer=str(offer) if offer is not None else "",
                    nodes=nodes,
                    instance_id=instance_id,
                    decision_id=decision_id,
                    team=team,
                    price_usd_hr=price_usd_hr,
                    payload=dict(payload or {}),
                    created_ts=now_ts,
                    error_code="",
                    error="",
                    result={},
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
    ) -> Intent:
        """The cloud call of intent `token` took effect: store the instances it created and the
        lifecycle steps it caused, and mark the intent confirmed, all in one transaction.
        Confirming twice is harmless: instances already stored are not duplicated."""
        with self.transaction() as s:
            row = s.get(IntentRow, token)
            if row is None:
                raise NotFound(f"no intent with token {token!r}")
            for inst in instances:
                if s.get(InstanceRow, inst.instance_id) is None:
                    s.add(_new_instance_row(inst, team=row.team, intent_token=token))
            for instance_id, to, reason in transitions:
                _transition(s, instance_id, to, now_ts, reason)
            if row.status != "confirmed":
                row.status = "confirmed"
                row.completed_ts = now_ts
                merged = dict(row.result or {})
                merged.update(result or {})
                if instances:
                    merged["instance_ids"] = sorted(
                        {*merged.get("instance_ids", []), *(i.instance_id for i in instances)}
                    )
                row.result = merged
            return _intent(row)

    def fail_intent(self, token: str, now_ts: float, error_code: str, error: str = "") -> Intent:
        with self.transaction() as s:
            row = s.get(IntentRow, token)
            if row is None:
                raise NotFound(f"no intent with token {token!r}")
            if row.status == "pending":
                row.status = "failed"
                row.completed_ts = now_ts
                row.error_code = error_code[:64]
                row.error = error[:2000]
            return _intent(row)

    def intent(self, token: str) -> Intent | None:
        with self.reading() as s:
            row = s.get(IntentRow, token)
            return _intent(row) if row else None

    def pending_intents(self, kind: str | None = None) -> list[Intent]:
        q = select(IntentRow).where(IntentRow.status == "pending")
        if kind:
            q = q.where(IntentRow.kind == kind)
        with self.reading() as s:
            return [_intent(r) for r in s.scalars(q.order_by(IntentRow.created_ts))]

    def intents(
        self,
        *,
        kind: str | None = None,
        status: str | None = None,
        since_ts: float | None = None,
        limit: int | None = None,
    ) -> list[Intent]:
        """Intents, oldest first, filtered by kind, status and creation time (the loop reads
        recent scale-ups to adopt the instances they launched and to rebuild the back-off)."""
        q = select(IntentRow)
        if kind:
            q = q.where(IntentRow.kind == kind)
        if status:
            q = q.where(IntentRow.status == status)
        if since_ts is not None:
            q = q.where(IntentRow.created_ts >= since_ts)
        q = q.order_by(IntentRow.created_ts, IntentRow.token)
        if limit is not None:
            q = q.limit(limit)
        with self.reading() as s:
            return [_intent(r) for r in s.scalars(q)]

    def failed_intent_counts(self, kind: str = "scale_up") -> dict[str, int]:
        q = (
            select(IntentRow.error_code, func.count())
            .where(IntentRow.status == "failed", IntentRow.kind == kind)
            .group_by(IntentRow.error_code)
        )
        with self.reading() as s:
            return {code or "unknown": int(n) for code, n in s.execute(q)}

    def add_instance(
        self, inst: CloudInstance, *, team: str = "", intent_token: str = ""
    ) -> StoredInstance:
        """Store an instance found by passive sync (by tag). Kept as is if already stored."""
        with self.transaction() as s:
            row = s.get(InstanceRow, inst.instance_id)
            if row is None:
                row = _new_instance_row(inst, team=team, intent_token=intent_token)
                s.add(row)
                s.flush()
            return _stored_instance(row)

    def transition(
        self, instance_id: str, to: InstanceState, at_ts: float, reason: str
    ) -> CloudInstance:
        """Move an instance along the domain's transition table, recording the step.
        Raises `IllegalTransition` for a step the table forbids, `NotFound` for no instance."""
        with self.transaction() as s:
            return _transition(s, instance_id, to, at_ts, reason)

    def set_node_name(self, instance_id: str, node_name: str) -> None:
        with self.transaction() as s:
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
        """Instances, filtered. `needs_billing`: alive, or ended but not billed to the end yet
        (the accountant's work list)."""
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
        """Live instances that stayed in their state longer than the per-state timeout."""
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
        """$/h of every instance requested or alive (in flight included)."""
        total = Decimal(0)
        for si in self.instances(live_only=True):
            total += si.instance.price_usd_hr
        return total

    # ------------------------------------------------------------------ job usage

    def record_job_usage(self, usages: Iterable[JobUsage]) -> int:
        """Upsert job-on-node records keyed by (job, node, start)."""
        n = 0
        with self.transaction() as s:
            for u in usages:
                row = s.scalars(
                    select(JobUsageRow).where(
                        JobUsageRow.job_id == u.job_id,
                        JobUsageRow.node_name == u.node_name,
                        JobUsageRow.start_ts == u.start_ts,
                    )
                ).first()
                if row is None:
                    row = JobUsageRow(job_id=u.job_id, node_name=u.node_name, start_ts=u.start_ts)
                    s.add(row)
                row.gpus = u.gpus
                row.end_ts = u.end_ts
                row.instance_id = u.instance_id
                row.pool = u.pool
                row.account = u.account
                row.team = u.team
                row.partition = u.partition
                row.user = u.user
                n += 1
        return n

    def end_job(self, job_id: str, end_ts: float) -> int:
        """Close every open usage record of a job."""
        with self.transaction() as s:
            res = s.execute(
                update(JobUsageRow)
                .where(JobUsageRow.job_id == job_id, JobUsageRow.end_ts.is_(None))
                .values(end_ts=end_ts)
            )
            return int(getattr(res, "rowcount", 0) or 0)

    def job_usage(
        self,
        *,
        node_name: str | None = None,
        instance_id: str | None = None,
        onprem_only: bool = False,
        overlapping: tuple[float, float] | None = None,
        unbilled_at: float | None = None,
    ) -> list[JobUsage]:
        """Usage records, filtered. `unbilled_at=now` keeps those that started before `now`
        and still have time the ledger has not covered (running, or billed short of the end)."""
        q = select(JobUsageRow)
        if node_name is not None:
            q = q.where(JobUsageRow.node_name == node_name)
        if instance_id is not None:
            q = q.where(JobUsageRow.instance_id == instance_id)
        if onprem_only:
            q = q.where(JobUsageRow.instance_id == "")
        if overlapping is not None:
            a, b = overlapping
            q = q.where(
                JobUsageRow.start_ts < b,
                (JobUsageRow.end_ts.is_(None)) | (JobUsageRow.end_ts > a),
            )
        if unbilled_at is not None:
            q = q.where(
                JobUsageRow.start_ts < unbilled_at,
                JobUsageRow.billed_until_ts.is_(None)
                | JobUsageRow.end_ts.is_(None)
                | (JobUsageRow.billed_until_ts < JobUsageRow.end_ts),
            )
        q = q.order_by(JobUsageRow.start_ts, JobUsageRow.id)
        with self.reading() as s:
            return [_usage(r) for r in s.scalars(q)]

    # ------------------------------------------------------------------ ledger

    def add_ledger(self, entries: Iterable[LedgerEntry]) -> int:
        with self.transaction() as s:
            return self._insert_ledger(s, entries)

    def commit_billing(
        self,
        entries: Sequence[LedgerEntry],
        *,
        instance_marks: Sequence[BillingMark] = (),
        usage_marks: Sequence[BillingMark] = (),
    ) -> int:
        """Write ledger rows and move the accounting watermarks in one transaction. A watermark
        that moved since it was read aborts the whole write (`ConcurrentUpdate`)."""
        with self.transaction() as s:
            for m in instance_marks:
                inst = s.get(InstanceRow, str(m.key), with_for_update=True)
                if inst is None:
                    raise NotFound(f"no instance {m.key!r}")
                if inst.billed_until_ts != m.expected:
                    raise ConcurrentUpdate(f"instance {m.key}: billed_until moved")
                inst.billed_until_ts = m.until
                inst.billed_seconds = (inst.billed_seconds or 0.0) + m.add_seconds
            for m in usage_marks:
                usage = s.get(JobUsageRow, int(m.key), with_for_update=True)
                if usage is None:
                    raise NotFound(f"no job usage {m.key!r}")
                if usage.billed_until_ts != m.expected:
                    raise ConcurrentUpdate(f"job usage {m.key}: billed_until moved")
                usage.billed_until_ts = m.until
            return self._insert_ledger(s, entries)

    def _insert_ledger(self, s: Session, entries: Iterable[LedgerEntry]) -> int:
        rows: list[dict[str, Any]] = []
        totals: dict[tuple[str, ...], list[int]] = {}
        for e in entries:
            if e.end_ts < e.start_ts:
                raise StoreError(f"ledger entry ends before it starts ({e.start_ts}, {e.end_ts})")
            if day_of(e.start_ts) != day_of(max(e.start_ts, e.end_ts - 1e-6)):
                raise StoreError("a ledger entry must not straddle a UTC midnight")
            micros = to_micros(e.cost)
            day = e.day
            rows.append(
                {
                    "start_ts": e.start_ts,
                    "end_ts": e.end_ts,
                    "day": day,
                    "kind": e.kind,
                    "cloud": e.cloud,
                    "region": e.region,
                    "pool": e.pool,
                    "instance_id": e.instance_id,
                    "node_name": e.node_name,
                    "offer": e.offer,
                    "instance_type": e.instance_type,
                    "capacity": e.capacity,
                    "job_id": e.job_id,
                    "team": e.team,
                    "account": e.account,
                    "user": e.user,
                    "partition": e.partition,
                    "decision_id": e.decision_id,
                    "gpus": e.gpus,
                    "quantity": e.quantity,
                    "unit": e.unit,
                    "unit_price_micros": to_micros(e.unit_price),
                    "cost_micros": micros,
                }
            )
            dims = {d: str(getattr(e, d)) for d in LEDGER_DIMENSIONS}
            for grain, keep in enumerate(GRAINS):
                key = (str(grain), day, *(dims[d] if d in keep else "" for d in LEDGER_DIMENSIONS))
                acc = totals.setdefault(key, [0, 0])
                acc[0] += micros
                acc[1] += 1
        if not rows:
            return 0
        s.execute(_table(LedgerRow).insert(), rows)
        self._add_rollups(s, totals)
        return len(rows)

    def _add_rollups(self, s: Session, totals: Mapping[tuple[str, ...], list[int]]) -> None:
        cols = ("grain", "day", *LEDGER_DIMENSIONS)
        values = [
            {
                **dict(zip(cols, key, strict=True)),
                "grain": int(key[0]),
                "cost_micros": c,
                "rows": n,
            }
            for key, (c, n) in totals.items()
        ]
        table = _table(RollupRow)
        if self.dialect in ("sqlite", "postgresql"):
            ins = (sqlite.insert if self.dialect == "sqlite" else postgresql.insert)(table)
            stmt = ins.on_conflict_do_update(
                index_elements=list(cols),
                set_={
                    "cost_micros": table.c.cost_micros + ins.excluded.cost_micros,
                    "rows": table.c.rows + ins.excluded.rows,
                },
            )
            for start in range(0, len(values), 500):
                s.execute(stmt, values[start : start + 500])
            return
        for v in values:  # pragma: no cover - other dialects: read, then write
            where = [table.c[c] == v[c] for c in cols]
            res = s.execute(
                update(table)
                .where(*where)
                .values(
                    cost_micros=table.c.cost_micros + v["cost_micros"],
                    rows=table.c.rows + v["rows"],
                )
            )
            if not getattr(res, "rowcount", 0):
                s.execute(table.insert(), [v])

    def rebuild_rollups(self) -> None:
        """Recompute every rollup from the ledger (a repair tool; normally maintained)."""
        led = _table(LedgerRow)
        rollup = _table(RollupRow)
        with self.transaction() as s:
            s.execute(rollup.delete())
            for grain, keep in enumerate(GRAINS):
                kept = [led.c[d] for d in LEDGER_DIMENSIONS if d in keep]
                out = [led.c[d] if d in keep else literal("").label(d) for d in LEDGER_DIMENSIONS]
                s.execute(
                    rollup.insert().from_select(
                        ["grain", "day", *LEDGER_DIMENSIONS, "cost_micros", "rows"],
                        select(
                            literal(grain).label("grain"),
                            led.c.day,
                            *out,
                            func.sum(led.c.cost_micros),
                            func.count(),
                        ).group_by(led.c.day, *kept),
                    )
                )

    def ledger_total(self, from_ts: float | None = None, to_ts: float | None = None) -> Decimal:
        q = select(func.coalesce(func.sum(LedgerRow.cost_micros), 0))
        if from_ts is not None:
            q = q.where(LedgerRow.start_ts >= from_ts)
        if to_ts is not None:
            q = q.where(LedgerRow.start_ts < to_ts)
        with self.reading() as s:
            return from_micros(int(s.execute(q).scalar_one()))

    def ledger_entries(
        self, *, instance_id: str | None = None, job_id: str | None = None
    ) -> list[LedgerEntry]:
        q = select(LedgerRow)
        if instance_id is not None:
            q = q.where(LedgerRow.instance_id == instance_id)
        if job_id is not None:
            q = q.where(LedgerRow.job_id == job_id)
        with self.reading() as s:
            return [_entry(r) for r in s.scalars(q.order_by(LedgerRow.start_ts, LedgerRow.id))]

    # ------------------------------------------------------------------ budgets

    def sync_budgets(self, budgets: Budgets, now_ts: float) -> None:
        """Replace the stored budgets by those in policy."""
        with self.transaction() as s:
            s.execute(_table(BudgetRow).delete())
            if budgets.global_usd_per_hour is not None:
                s.add(
                    BudgetRow(
                        scope="global",
                        name="*",
                        usd_per_hour=budgets.global_usd_per_hour,
                        updated_ts=now_ts,
                    )
                )
            for team, tb in budgets.teams.items():
                s.add(
                    BudgetRow(
                        scope="team", name=team, monthly_usd=tb.monthly_usd, updated_ts=now_ts
                    )
                )

    def budgets(self) -> list[BudgetRecord]:
        with self.reading() as s:
            q = select(BudgetRow).order_by(BudgetRow.scope, BudgetRow.name)
            return [
                BudgetRecord(r.scope, r.name, r.monthly_usd, r.usd_per_hour) for r in s.scalars(q)
            ]

    # ------------------------------------------------------------------ API tokens

    def add_token(self, rec: TokenRecord) -> None:
        with self.transaction() as s:
            s.add(
                ApiTokenRow(
                    token_id=rec.token_id,
                    name=rec.name,
                    role=rec.role,
                    salt=rec.salt,
                    secret_hash=rec.secret_hash,
                    created_ts=rec.created_ts,
                    revoked_ts=rec.revoked_ts,
                )
            )

    def token(self, token_id: str) -> TokenRecord | None:
        with self.reading() as s:
            row = s.get(ApiTokenRow, token_id)
            return _token(row) if row else None

    def tokens(self) -> list[TokenRecord]:
        with self.reading() as s:
            q = select(ApiTokenRow).order_by(ApiTokenRow.created_ts, ApiTokenRow.token_id)
            return [_token(r) for r in s.scalars(q)]

    def revoke_token(self, token_id: str, now_ts: float) -> bool:
        with self.transaction() as s:
            row = s.get(ApiTokenRow, token_id)
            if row is None:
                return False
            if row.revoked_ts is None:
                row.revoked_ts = now_ts
            return True

    # ------------------------------------------------------------------ telemetry

    def upsert_telemetry(self, node: str, samples: Iterable[GpuSample], received_ts: float) -> int:
        """Keep the latest sample of each GPU of `node` (an older sample never overwrites)."""
        n = 0
        with self.transaction() as s:
            for g in samples:
                row = s.get(TelemetryRow, (node, g.index))
                if row is None:
                    row = TelemetryRow(node=node, gpu_index=g.index)
                    s.add(row)
                elif row.sampled_ts > g.sampled_ts:
                    continue
                row.uuid = g.uuid
                row.util_pct = g.util_pct
                row.mem_used_mib = g.mem_used_mib
                row.mem_total_mib = g.mem_total_mib
                row.power_w = g.power_w
                row.energy_mj = g.energy_mj
                row.temperature_c = g.temperature_c
                row.sampled_ts = g.sampled_ts
                row.received_ts = received_ts
                n += 1
        return n

    def telemetry(self, node: str | None = None) -> list[NodeTelemetry]:
        q = select(TelemetryRow).order_by(TelemetryRow.node, TelemetryRow.gpu_index)
        if node is not None:
            q = q.where(TelemetryRow.node == node)
        out: dict[str, list[TelemetryRow]] = {}
        with self.reading() as s:
            for r in s.scalars(q):
                out.setdefault(r.node, []).append(r)
        return [
            NodeTelemetry(
                node=name,
                received_ts=max(r.received_ts for r in rows),
                gpus=tuple(
                    GpuSample(
                        index=r.gpu_index,
                        uuid=r.uuid,
                        util_pct=r.util_pct,
                        mem_used_mib=r.mem_used_mib,
                        mem_total_mib=r.mem_total_mib,
                        power_w=r.power_w,
                        energy_mj=r.energy_mj,
                        temperature_c=r.temperature_c,
                        sampled_ts=r.sampled_ts,
                    )
                    for r in rows
                ),
            )
            for name, rows in out.items()
        ]

    def put_telemetry_payload(
        self,
        node: str,
        sampled_ts: float,
        received_ts: float,
        payload: Mapping[str, Any],
        idle_since: Mapping[int, float],
    ) -> bool:
        """Keep a node's latest whole payload. An older sample never overwrites a newer one
        (False: not stored)."""
        with self.transaction() as s:
            row = s.get(TelemetryPayloadRow, node, with_for_update=True)
            if row is None:
                row = TelemetryPayloadRow(node=node)
                s.add(row)
            elif row.sampled_ts > sampled_ts:
                return False
            row.sampled_ts = sampled_ts
            row.received_ts = received_ts
            row.payload = dict(payload)
            row.idle_since = {str(k): float(v) for k, v in idle_since.items()}
            return True

    def telemetry_payloads(self, node: str | None = None) -> list[StoredPayload]:
        q = select(TelemetryPayloadRow).order_by(TelemetryPayloadRow.node)
        if node is not None:
            q = q.where(TelemetryPayloadRow.node == node)
        with self.reading() as s:
            return [
                StoredPayload(
                    r.node,
                    r.sampled_ts,
                    r.received_ts,
                    dict(r.payload or {}),
                    {int(k): float(v) for k, v in (r.idle_since or {}).items()},
                )
                for r in s.scalars(q)
            ]

    def energy_marks(self, node: str | None = None) -> dict[tuple[str, str], EnergyMark]:
        """Energy watermarks keyed by (node, gpu_key)."""
        q = select(EnergyMarkRow)
        if node is not None:
            q = q.where(EnergyMarkRow.node == node)
        with self.reading() as s:
            return {
                (r.node, r.gpu_key): EnergyMark(
                    r.node, r.gpu_key, r.sampled_ts, r.energy_mj, r.power_w
                )
                for r in s.scalars(q)
            }

    def commit_energy(
        self,
        entries: Sequence[LedgerEntry],
        marks: Sequence[tuple[EnergyMark | None, EnergyMark]],
        now_ts: float,
    ) -> int:
        """Write energy ledger rows and move the GPUs' energy watermarks in one transaction.
        Each mark is (what was read, None if there was none; the new one); a watermark that
        moved since it was read aborts the whole write (`ConcurrentUpdate`)."""
        with self.transaction() as s:
            for expected, new in marks:
                row = s.get(EnergyMarkRow, (new.node, new.gpu_key), with_for_update=True)
                seen = row.sampled_ts if row is not None else None
                if seen != (expected.sampled_ts if expected is not None else None):
                    raise ConcurrentUpdate(f"energy mark {new.node}/{new.gpu_key} moved")
                if row is None:
                    row = EnergyMarkRow(node=new.node, gpu_key=new.gpu_key)
                    s.add(row)
                row.sampled_ts = new.sampled_ts
                row.energy_mj = new.energy_mj
                row.power_w = new.power_w
                row.updated_ts = now_ts
            return self._insert_ledger(s, entries)


# --------------------------------------------------------------------------- row <-> record


def _pool(r: PoolRow) -> PoolInfo:
    return PoolInfo(
        name=r.name,
        cloud=r.cloud,
        regions=tuple(r.regions or ()),
        partition=r.partition,
        team=r.team,
        gpu_model=r.gpu_model,
        capacity=r.capacity,
        max_nodes=r.max_nodes,
        drained=bool(r.drained),
        drained_ts=r.drained_ts,
        drained_by=r.drained_by,
    )


def _intent(r: IntentRow) -> Intent:
    return Intent(
        token=r.token,
        kind=r.kind,
        status=r.status,
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
        ended_ts=inst.entered_state_ts if inst.state.terminal else None,
        decision_id=inst.decision_id,
        node_name=inst.node_name,
        team=team,
        intent_token=intent_token,
        billed_until_ts=None,
        billed_seconds=0.0,
    )
    steps = inst.history or (Transition(None, inst.state, inst.launched_ts, "recorded"),)
    row.history = [
        InstanceTransitionRow(
            seq=i,
            from_state=str(t.from_state) if t.from_state is not None else None,
            to_state=str(t.to_state),
            at_ts=t.at_ts,
            reason=t.reason,
        )
        for i, t in enumerate(steps)
    ]
    return row


def _cloud_instance(r: InstanceRow) -> CloudInstance:
    history = tuple(
        Transition(
            InstanceState(t.from_state) if t.from_state is not None else None,
            InstanceState(t.to_state),
            t.at_ts,
            t.reason,
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
    s: Session, instance_id: str, to: InstanceState, at_ts: float, reason: str
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
    moved = current.transition(to, at_ts, reason)  # the domain's table decides
    if moved is current:
        return current
    row.state = str(moved.state)
    row.entered_state_ts = at_ts
    if moved.state.terminal and row.ended_ts is None:
        row.ended_ts = at_ts
    step = moved.history[-1]
    row.history.append(
        InstanceTransitionRow(
            seq=len(row.history),
            from_state=str(step.from_state) if step.from_state is not None else None,
            to_state=str(step.to_state),
            at_ts=step.at_ts,
            reason=step.reason,
        )
    )
    return moved


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
            "rejected_because": a.rejected_because,
        }
        for a in d.alternatives
    ]
    row.predicted_wait_s = d.predicted_wait_s
    row.wait_budget_s = d.wait_budget_s
    row.wait_saved_s = d.wait_saved_s
    row.global_headroom_usd_hr = d.global_headroom_usd_hr
    row.team_headroom_usd = d.team_headroom_usd
    row.detail = {str(k): str(v) for k, v in d.detail.items()}


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
            rejected_because=str(a.get("rejected_because", "")),
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
        detail=dict(r.detail or {}),
    )
    return StoredDecision(d, r.created_ts, r.iac_review, r.iac_review_format, r.reason)


def _usage(r: JobUsageRow) -> JobUsage:
    return JobUsage(
        job_id=r.job_id,
        node_name=r.node_name,
        gpus=r.gpus,
        start_ts=r.start_ts,
        end_ts=r.end_ts,
        instance_id=r.instance_id,
        pool=r.pool,
        account=r.account,
        team=r.team,
        partition=r.partition,
        user=r.user,
        usage_id=r.id,
        billed_until_ts=r.billed_until_ts,
    )


def _entry(r: LedgerRow) -> LedgerEntry:
    return LedgerEntry(
        start_ts=r.start_ts,
        end_ts=r.end_ts,
        kind=r.kind,
        cost=from_micros(r.cost_micros),
        cloud=r.cloud,
        region=r.region,
        pool=r.pool,
        instance_id=r.instance_id,
        node_name=r.node_name,
        offer=r.offer,
        instance_type=r.instance_type,
        capacity=r.capacity,
        job_id=r.job_id,
        team=r.team,
        account=r.account,
        user=r.user,
        partition=r.partition,
        decision_id=r.decision_id,
        gpus=r.gpus,
        quantity=r.quantity,
        unit=r.unit,
        unit_price=from_micros(r.unit_price_micros),
    )


def _token(r: ApiTokenRow) -> TokenRecord:
    return TokenRecord(
        token_id=r.token_id,
        name=r.name,
        role=r.role,
        salt=r.salt,
        secret_hash=r.secret_hash,
        created_ts=r.created_ts,
        revoked_ts=r.revoked_ts,
    )
