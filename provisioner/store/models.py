"""The store's tables, as typed SQLAlchemy 2 ORM classes.

Conventions:
- times are POSIX seconds (UTC) in FLOAT columns, like the domain;
- money is exact: ledger costs are integer micro-dollars (sums in SQL stay exact), other amounts
  are Decimal kept as text (`DecimalText`), never floats;
- grouping dimensions are NOT NULL with '' for "none", so unique keys and GROUP BY behave the
  same on SQLite and PostgreSQL.

The schema is created by the Alembic migrations in `migrations/versions`, never by
`metadata.create_all`; a test checks that the two agree.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from provisioner.ports.store import LEDGER_DIMENSIONS

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class DecimalText(TypeDecorator[Decimal]):
    """A Decimal stored as its exact text (SQLite has no exact decimal type)."""

    impl = String(64)
    cache_ok = True

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return str(Decimal(value))

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        return Decimal(str(value))


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class PoolRow(Base):
    """A burst pool as declared in policy, plus the operator's drain flag."""

    __tablename__ = "pools"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    cloud: Mapped[str] = mapped_column(String(16))
    regions: Mapped[list[str]] = mapped_column(JSON, default=list)
    partition: Mapped[str] = mapped_column(String(64), default="")
    team: Mapped[str] = mapped_column(String(64), default="")
    gpu_model: Mapped[str] = mapped_column(String(64), default="")
    capacity: Mapped[str] = mapped_column(String(16), default="any")
    max_nodes: Mapped[int] = mapped_column(Integer, default=0)
    drained: Mapped[bool] = mapped_column(Boolean, default=False)
    drained_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    drained_by: Mapped[str] = mapped_column(String(128), default="")
    updated_ts: Mapped[float] = mapped_column(Float, default=0.0)


class OperatorStateRow(Base):
    """One row (id=1): the operator's switches."""

    __tablename__ = "operator_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str] = mapped_column(String(500), default="")
    updated_ts: Mapped[float] = mapped_column(Float, default=0.0)
    updated_by: Mapped[str] = mapped_column(String(128), default="")
    # The sweep's safety valve: why it holds (empty: it does not), since when, and when an
    # operator last let it go ahead.
    sweep_hold_reason: Mapped[str] = mapped_column(String(500), default="", server_default="")
    sweep_hold_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    sweep_approved_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    sweep_approved_by: Mapped[str] = mapped_column(String(128), default="", server_default="")
    # This installation's controller identity (the `controller` tag); "" until first claimed.
    controller_id: Mapped[str] = mapped_column(String(41), default="", server_default="")


class LeaderLeaseRow(Base):
    """The leader lease (one row per lease name): who holds it, until when, and the fencing
    token, which grows by one with every change of holder. Times are the database's clock."""

    __tablename__ = "leader_lease"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200), default="")
    token: Mapped[int] = mapped_column(BigInteger, default=0)
    acquired_ts: Mapped[float] = mapped_column(Float, default=0.0)
    renewed_ts: Mapped[float] = mapped_column(Float, default=0.0)
    expires_ts: Mapped[float] = mapped_column(Float, default=0.0)
    # Writes refused because they carried a stale token (for the API and the failover bench).
    refused: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class IntentRow(Base):
    """What the controller is about to do, written before the cloud call and confirmed after.

    `token` is the idempotency token sent with the cloud call (and put in the resource's tags),
    so a restart can find out whether the call took effect.
    """

    __tablename__ = "intents"

    token: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))  # domain.intents.IntentKind
    status: Mapped[str] = mapped_column(String(16), index=True)  # IntentStatus
    pool: Mapped[str] = mapped_column(String(64), default="")
    offer: Mapped[str] = mapped_column(String(256), default="")
    nodes: Mapped[int] = mapped_column(Integer, default=0)
    instance_id: Mapped[str] = mapped_column(String(128), default="")
    decision_id: Mapped[str] = mapped_column(String(64), default="")
    team: Mapped[str] = mapped_column(String(64), default="")
    price_usd_hr: Mapped[Decimal | None] = mapped_column(DecimalText, nullable=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_ts: Mapped[float] = mapped_column(Float)
    completed_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    error_code: Mapped[str] = mapped_column(String(64), default="")
    error: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # domain.failures.ErrorCategory of the outcome ('' for none), set when the intent completes;
    # NULL while pending and on rows completed before migration 0007.
    error_category: Mapped[str | None] = mapped_column(String(32), nullable=True)


class InstanceRow(Base):
    __tablename__ = "instances"

    instance_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    pool: Mapped[str] = mapped_column(String(64), index=True)
    cloud: Mapped[str] = mapped_column(String(16))
    region: Mapped[str] = mapped_column(String(64))
    instance_type: Mapped[str] = mapped_column(String(64))
    capacity: Mapped[str] = mapped_column(String(16))
    gpu_model: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer)
    price_usd_hr: Mapped[Decimal] = mapped_column(DecimalText)
    state: Mapped[str] = mapped_column(String(16), index=True)
    launched_ts: Mapped[float] = mapped_column(Float)
    entered_state_ts: Mapped[float] = mapped_column(Float)
    ended_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    decision_id: Mapped[str] = mapped_column(String(64), default="")
    node_name: Mapped[str] = mapped_column(String(128), default="", index=True)
    team: Mapped[str] = mapped_column(String(64), default="")
    intent_token: Mapped[str] = mapped_column(String(128), default="")
    # Accounting watermark: cost is in the ledger up to this time.
    billed_until_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    billed_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # InstanceOrigin: "planned" (our scale-up) or "orphan" (rebuilt from its cloud tags)
    origin: Mapped[str] = mapped_column(String(16), default="planned", server_default="planned")

    history: Mapped[list[InstanceTransitionRow]] = relationship(
        back_populates="instance",
        order_by="InstanceTransitionRow.seq",
        cascade="all, delete-orphan",
    )


class InstanceTransitionRow(Base):
    __tablename__ = "instance_transitions"
    __table_args__ = (UniqueConstraint("instance_id", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("instances.instance_id", ondelete="CASCADE"), index=True
    )
    seq: Mapped[int] = mapped_column(Integer)
    from_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_state: Mapped[str] = mapped_column(String(16))
    at_ts: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text, default="")
    # the cloud's own stamp for the step, translated and clamped (billing starts/ends there)
    cloud_ts: Mapped[float | None] = mapped_column(Float, nullable=True)

    instance: Mapped[InstanceRow] = relationship(back_populates="history")


class DecisionRow(Base):
    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_created_ts_reason", "created_ts", "reason"),)

    decision_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_ts: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(String(64), index=True)
    team: Mapped[str] = mapped_column(String(64), default="")
    job_ids: Mapped[list[str]] = mapped_column(JSON, default=list)
    chosen: Mapped[str] = mapped_column(String(256), default="")
    alternatives: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    predicted_wait_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    wait_budget_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    wait_saved_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    global_headroom_usd_hr: Mapped[Decimal | None] = mapped_column(DecimalText, nullable=True)
    team_headroom_usd: Mapped[Decimal | None] = mapped_column(DecimalText, nullable=True)
    detail: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    iac_review: Mapped[str | None] = mapped_column(Text, nullable=True)
    iac_review_format: Mapped[str] = mapped_column(String(16), default="")


class JobUsageRow(Base):
    """A job's time on one node. `end_ts` is None while it runs."""

    __tablename__ = "job_usage"
    __table_args__ = (
        UniqueConstraint("job_id", "node_name", "start_ts"),
        Index("ix_job_usage_node_name_start_ts", "node_name", "start_ts"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(128), index=True)
    node_name: Mapped[str] = mapped_column(String(128))
    instance_id: Mapped[str] = mapped_column(String(128), default="", index=True)
    pool: Mapped[str] = mapped_column(String(64), default="")
    gpus: Mapped[int] = mapped_column(Integer)
    start_ts: Mapped[float] = mapped_column(Float)
    end_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    account: Mapped[str] = mapped_column(String(128), default="")
    team: Mapped[str] = mapped_column(String(128), default="")
    partition: Mapped[str] = mapped_column(String(128), default="")
    user: Mapped[str] = mapped_column(String(128), default="")
    # On-prem accounting watermark (cloud usage is billed through its instance).
    billed_until_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Parts of GPUs held beside the whole ones, as a share of one GPU (MIG devices, shards)
    part_gpus: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # Which part: a MIG GRES type (`1g.10gb`), `shard`, or "" for whole GPUs only
    gpu_part: Mapped[str] = mapped_column(String(128), default="", server_default="")


class LedgerRow(Base):
    """One priced slice of time. Rows never straddle a UTC midnight, so `day` is exact."""

    __tablename__ = "ledger"
    # Covering index for window scans: the edges of a report read only this index.
    __table_args__ = (
        Index("ix_ledger_window", "start_ts", "day", *LEDGER_DIMENSIONS, "cost_micros"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    start_ts: Mapped[float] = mapped_column(Float)
    end_ts: Mapped[float] = mapped_column(Float)
    day: Mapped[str] = mapped_column(String(10))
    kind: Mapped[str] = mapped_column(String(16))  # job | idle | onprem | energy
    cloud: Mapped[str] = mapped_column(String(16), default="")
    region: Mapped[str] = mapped_column(String(64), default="")
    pool: Mapped[str] = mapped_column(String(64), default="")
    instance_id: Mapped[str] = mapped_column(String(128), default="", index=True)
    node_name: Mapped[str] = mapped_column(String(128), default="")
    offer: Mapped[str] = mapped_column(String(256), default="")
    instance_type: Mapped[str] = mapped_column(String(64), default="")
    capacity: Mapped[str] = mapped_column(String(16), default="")
    job_id: Mapped[str] = mapped_column(String(128), default="", index=True)
    team: Mapped[str] = mapped_column(String(128), default="")
    account: Mapped[str] = mapped_column(String(128), default="")
    user: Mapped[str] = mapped_column(String(128), default="")
    partition: Mapped[str] = mapped_column(String(128), default="")
    decision_id: Mapped[str] = mapped_column(String(64), default="")
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    # Usage quantity and unit price: GPU-seconds at $/GPU-h for jobs and on-prem, instance
    # seconds at $/h for idle, kWh at $/kWh for energy.
    quantity: Mapped[float] = mapped_column(Float, default=0.0)
    unit: Mapped[str] = mapped_column(String(16), default="")
    unit_price_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_micros: Mapped[int] = mapped_column(BigInteger)
    # The part of a GPU the row's job held (a MIG GRES type, `shard`); "" otherwise. No rollup
    # keeps it: a report by slice reads the ledger, as one by node does.
    gpu_part: Mapped[str] = mapped_column(String(128), default="", server_default="")

    @property
    def cost(self) -> Decimal:
        return Decimal(self.cost_micros).scaleb(-6)


# Rollup grains: which dimensions each pre-aggregated grain keeps ('' in the others). A report
# reads the smallest grain that holds every key it groups or filters by; grain 0 holds them all.
GRAINS: tuple[tuple[str, ...], ...] = (
    LEDGER_DIMENSIONS,
    ("kind", "team"),
    ("kind", "team", "partition"),
    ("kind", "team", "cloud", "region", "pool"),
    ("kind", "team", "account", "user"),
)


class RollupRow(Base):
    """Ledger totals per grain, UTC day and dimension tuple, maintained in the ledger's own
    transaction. Reports over whole days read this table; partial days read the ledger.

    On SQLite the table is WITHOUT ROWID: rows live in primary-key order, so the range of one
    grain and a span of days is one sequential read.
    """

    __tablename__ = "ledger_rollup"
    __table_args__ = ({"sqlite_with_rowid": False},)

    grain: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    day: Mapped[str] = mapped_column(String(10), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    team: Mapped[str] = mapped_column(String(128), primary_key=True)
    account: Mapped[str] = mapped_column(String(128), primary_key=True)
    user: Mapped[str] = mapped_column(String(128), primary_key=True)
    partition: Mapped[str] = mapped_column(String(128), primary_key=True)
    cloud: Mapped[str] = mapped_column(String(16), primary_key=True)
    region: Mapped[str] = mapped_column(String(64), primary_key=True)
    pool: Mapped[str] = mapped_column(String(64), primary_key=True)
    cost_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    rows: Mapped[int] = mapped_column(Integer, default=0)


class BudgetRow(Base):
    """A budget from policy: scope 'team' (monthly $) or 'global' ($/h)."""

    __tablename__ = "budgets"

    scope: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    monthly_usd: Mapped[Decimal | None] = mapped_column(DecimalText, nullable=True)
    usd_per_hour: Mapped[Decimal | None] = mapped_column(DecimalText, nullable=True)
    updated_ts: Mapped[float] = mapped_column(Float, default=0.0)


class ApiTokenRow(Base):
    """An API bearer token. Only a salted HMAC-SHA256 of the secret is kept."""

    __tablename__ = "api_tokens"

    token_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    role: Mapped[str] = mapped_column(String(16))
    salt: Mapped[str] = mapped_column(String(64))
    secret_hash: Mapped[str] = mapped_column(String(128))
    created_ts: Mapped[float] = mapped_column(Float)
    revoked_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    node: Mapped[str | None] = mapped_column(String(128), nullable=True)
    expires_ts: Mapped[float | None] = mapped_column(Float, nullable=True)


class TelemetryRow(Base):
    """The latest sample of each GPU of each node."""

    __tablename__ = "gpu_telemetry"

    node: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(128), default="")
    util_pct: Mapped[float] = mapped_column(Float)
    mem_used_mib: Mapped[float] = mapped_column(Float, default=0.0)
    mem_total_mib: Mapped[float] = mapped_column(Float, default=0.0)
    power_w: Mapped[float | None] = mapped_column(Float, nullable=True)
    energy_mj: Mapped[float | None] = mapped_column(Float, nullable=True)
    temperature_c: Mapped[float | None] = mapped_column(Float, nullable=True)
    sampled_ts: Mapped[float] = mapped_column(Float)
    received_ts: Mapped[float] = mapped_column(Float)


class TelemetryPayloadRow(Base):
    """The latest whole agent payload of each node (ECC, Xid, job mapping: what `gpu_telemetry`
    does not keep), and since when each GPU has been idle ("index" -> POSIX seconds), for the
    waste and health views. Added by migration 0002."""

    __tablename__ = "gpu_telemetry_payload"

    node: Mapped[str] = mapped_column(String(128), primary_key=True)
    sampled_ts: Mapped[float] = mapped_column(Float)
    received_ts: Mapped[float] = mapped_column(Float)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    idle_since: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)


class EnergyMarkRow(Base):
    """Energy accounting watermark of one GPU: the last sample whose energy is in the ledger.
    `gpu_key` is the GPU's UUID ('#<index>' when NVML gave none). Added by migration 0002."""

    __tablename__ = "gpu_energy_marks"

    node: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu_key: Mapped[str] = mapped_column(String(128), primary_key=True)
    sampled_ts: Mapped[float] = mapped_column(Float)
    energy_mj: Mapped[float | None] = mapped_column(Float, nullable=True)
    power_w: Mapped[float | None] = mapped_column(Float, nullable=True)
    updated_ts: Mapped[float] = mapped_column(Float, default=0.0)


def _table(cls: type[Any]) -> Table:
    return cast(Table, cls.__table__)
