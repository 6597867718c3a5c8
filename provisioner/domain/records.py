"""The records the store hands to and from its callers: frozen dataclasses of domain values, with
no ORM in them, so account/ and reconcile/ compute on them without knowing how they are kept.
Also the leader lease and the fence a leader's writes carry, and the micro-dollar and UTC-day
helpers the ledger is kept in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from provisioner.domain.failures import ErrorCategory
from provisioner.domain.instances import CloudInstance
from provisioner.domain.intents import (
    IntentKind,
    IntentPayload,
    IntentStatus,
    ScaleUpPayload,
    TerminatePayload,
)
from provisioner.domain.money import MICRO
from provisioner.domain.nodes import GpuSample
from provisioner.domain.offers import OfferKey
from provisioner.domain.plan import Decision


def to_micros(amount: Decimal) -> int:
    return int(amount.quantize(MICRO).scaleb(6))


def from_micros(micros: int) -> Decimal:
    return Decimal(int(micros)).scaleb(-6).quantize(MICRO)


def day_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


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
    sweep_hold_reason: str = ""  # the sweep's safety valve holds (empty: it does not)
    sweep_hold_ts: float | None = None
    sweep_approved_ts: float | None = None
    sweep_approved_by: str = ""

    @property
    def sweep_approved(self) -> bool:
        """An operator let the held sweep go ahead since it started holding."""
        return (
            self.sweep_approved_ts is not None
            and self.sweep_hold_ts is not None
            and self.sweep_approved_ts >= self.sweep_hold_ts
        )


@dataclass(frozen=True, slots=True)
class Intent:
    """A cloud call recorded before it is made. `payload` is the JSON as stored; read it
    through `scale_up_payload` / `terminate_payload`. `error_category` is None where it was not
    recorded: the intent is pending, or it completed before migration 0007 (its category is
    then only the prefix of `error_code`, or of a shortfall code in `result`)."""

    token: str
    kind: IntentKind
    status: IntentStatus
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
    error_category: ErrorCategory | None = None

    def __post_init__(self) -> None:
        # Callers may pass the plain strings the store keeps; hold the enums.
        object.__setattr__(self, "kind", IntentKind(self.kind))
        object.__setattr__(self, "status", IntentStatus(self.status))
        if self.error_category is not None:
            object.__setattr__(self, "error_category", ErrorCategory.parse(self.error_category))

    @property
    def scale_up_payload(self) -> ScaleUpPayload:
        return ScaleUpPayload.from_json(self.payload)

    @property
    def terminate_payload(self) -> TerminatePayload:
        return TerminatePayload.from_json(self.payload)


@dataclass(frozen=True, slots=True)
class NewIntent:
    """What `record_intent` is asked to write: one value, so the store's implementations and
    the Protocols that describe them name these fields once, here. `now_ts` becomes the
    stored intent's `created_ts`. The store checks it (an empty token is a `StoreError`) and
    turns `offer` and a typed `payload` into the strings and JSON it keeps."""

    kind: IntentKind
    token: str
    now_ts: float
    _: KW_ONLY  # the rest by name, as record_intent's keyword-only parameters were
    pool: str = ""
    offer: OfferKey | str | None = None
    nodes: int = 0
    instance_id: str = ""
    decision_id: str = ""
    team: str = ""
    price_usd_hr: Decimal | None = None
    payload: IntentPayload | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # Callers may pass the plain strings the store keeps (as `Intent` accepts); a kind this
        # version does not know is kept verbatim by `IntentKind._missing_`.
        if isinstance(self.kind, str):
            object.__setattr__(self, "kind", IntentKind(self.kind))

    @property
    def offer_text(self) -> str:
        """The offer as both stores keep it: its string form, "" for none."""
        return str(self.offer) if self.offer is not None else ""


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
    # Parts of GPUs it holds beside `gpus` whole ones, as a share of one GPU: 1/7 for a one-slice
    # MIG device, 3/4 for 3 shards of a GPU split in 4 (observe/slurm/usage.py)
    part_gpus: float = 0.0
    # Which part it holds (`ShareRequest.part`): a MIG GRES type, `shard`; "" for whole GPUs only
    gpu_part: str = ""

    @property
    def gpu_weight(self) -> float:
        """The GPUs it holds, whole and in parts: what its node's price is split by."""
        return self.gpus + self.part_gpus

    def gpu_seconds(self, until_ts: float | None = None) -> float:
        """GPU time used so far: to the end, or to `until_ts` while it runs."""
        end = self.end_ts if self.end_ts is not None else until_ts
        if end is None:
            return 0.0
        return max(0.0, end - self.start_ts) * self.gpu_weight


class LedgerKind(StrEnum):
    """What a ledger row pays for. Stored as its string."""

    JOB = "job"  # a job's GPU time on a cloud instance
    IDLE = "idle"  # an instance's time no job used
    UNBOUND = "unbound"  # cloud time before the instance joined Slurm
    ORPHAN = "orphan"  # time of an instance found by its tags with no record
    ONPREM = "onprem"  # a job's GPU time on-prem, amortised
    ENERGY = "energy"  # GPU energy


# The kinds the clouds bill: budgets count these.
CLOUD_KINDS = (LedgerKind.JOB, LedgerKind.IDLE, LedgerKind.UNBOUND, LedgerKind.ORPHAN)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One priced slice of time. `cost` is Decimal dollars, kept to the micro-dollar."""

    start_ts: float
    end_ts: float
    kind: LedgerKind
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
    # The part of a GPU its job held (`JobUsage.gpu_part`); "" for whole GPUs and no job's rows
    gpu_part: str = ""

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
    node: str | None = None  # agent tokens: the node they are bound to
    expires_ts: float | None = None


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


@dataclass(frozen=True, slots=True)
class Fence:
    """What a leader's writes carry: the lease, its holder and the token it was granted."""

    name: str
    holder: str
    token: int
    ttl_s: float


@dataclass(frozen=True, slots=True)
class Lease:
    """A leader lease as it stands: who holds it, since and until when (the store's clock), the
    fencing token of the current term and how many writes were refused for a stale token."""

    name: str
    holder: str
    token: int
    acquired_ts: float
    renewed_ts: float
    expires_ts: float
    refused: int = 0

    def held_by(self, holder: str, now_ts: float) -> bool:
        return self.holder == holder and self.expires_ts > now_ts
