"""The store's repositories as narrow Protocols, so a caller can say which slice of the store it
needs and a test can hand it a small in-memory one (`provisioner.store.memory`).

This is where the store's contract is written: each method's signature once, with the behaviour
it promises in its docstring. One Protocol per store concern: `IntentLog` and `InstanceRepo`
(`store/instances.py`), `DecisionLog`, `Ledger`, `TokenRepo`, `PolicyRepo` (pools, the
operator's switches, budgets), `TelemetryRepo` (GPU telemetry and energy marks), `Fencing` and
`LeaderLease` (the leader lease), `RuntimeHistory` and `ClockMarks`; `ControllerStore` is all of
them together, the store as the reconcile loop sees it. The SQL store's concerns
(`provisioner.store.*`) and the in-memory classes (`provisioner.store.memory`) subclass their
Protocols explicitly, so mypy checks every signature against the port and refuses to build a
class that lacks a member (`provisioner.store.Store` is a `ControllerStore`). The behaviour is
pinned down by one contract suite per port under `tests/contract/` (`test_store_*contract.py`),
run against the in-memory classes, SQLite and PostgreSQL alike.

Promises shared by all of them:

- Writes are all-or-nothing: a call that writes several rows either writes them all or, when
  it raises, none (for the SQL store, one transaction per call).
- Records handed out are frozen domain values (`provisioner.domain.records`); changing what a
  caller holds never changes what is stored.
- Errors are the store's typed ones (`StoreError`, `NotFound`, `ConcurrentUpdate`,
  `FencedOut`), never a driver's, except where a docstring says otherwise.
- Times are UTC POSIX seconds (floats), money is `Decimal`.
- "Fenced": a write that acts on the world. When the store carries a fence (a controller in HA
  mode, see `Fencing`), the SQL store refuses such a write whole with `FencedOut` unless the
  fence is the current, unexpired lease. The in-memory classes have no fence on their writes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from provisioner.clock import ClockMark
from provisioner.config.models import Budgets, PoolPolicy
from provisioner.domain.cloud_clock import SkewEstimate
from provisioner.domain.errors import ProvisionerError
from provisioner.domain.failures import ErrorCategory
from provisioner.domain.gpu_usage import GpuUsage
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.intents import IntentKind, IntentStatus
from provisioner.domain.job_records import JobRecord
from provisioner.domain.nodes import GpuSample
from provisioner.domain.plan import Decision
from provisioner.domain.records import (
    BillingMark,
    BudgetRecord,
    EnergyMark,
    Fence,
    Intent,
    JobUsage,
    Lease,
    LedgerEntry,
    NewIntent,
    NodeTelemetry,
    OperatorState,
    PoolInfo,
    StoredDecision,
    StoredInstance,
    StoredPayload,
    TokenRecord,
)

# ----------------------------------------------------------------------------- errors
# The typed errors every port raises (the promises above name them).

# The ledger columns `ledger_export` yields, in this order (the FOCUS export and the ledger
# page unpack them).
EXPORT_COLUMNS = (
    "start_ts",
    "end_ts",
    "day",
    "kind",
    "cloud",
    "region",
    "pool",
    "instance_id",
    "node_name",
    "offer",
    "instance_type",
    "capacity",
    "job_id",
    "team",
    "account",
    "user",
    "partition",
    "decision_id",
    "quantity",
    "unit",
    "unit_price_micros",
    "cost_micros",
)


# The ledger's report dimensions: what the rollups keep and the covering window index holds.
LEDGER_DIMENSIONS = (
    "kind",
    "team",
    "account",
    "user",
    "partition",
    "cloud",
    "region",
    "pool",
)
# The text columns a ledger page may filter on by equality.
FILTER_COLUMNS = ("day", *LEDGER_DIMENSIONS, "node_name", "gpu_part", "instance_id", "job_id")


@dataclass(frozen=True, slots=True)
class LedgerFilter:
    """The ledger rows starting in [from_ts, to_ts) whose columns equal `equals` (pairs of a
    FILTER_COLUMNS name and its value), of `kinds` (all when empty), of `unit` (any when
    None), and of `instance_ids` (any when None; none when empty)."""

    from_ts: float
    to_ts: float
    equals: tuple[tuple[str, str], ...] = ()
    kinds: tuple[str, ...] = ()
    unit: str | None = None
    instance_ids: frozenset[str] | None = None


@dataclass(slots=True)
class LedgerPage:
    """A page of the matching rows (EXPORT_COLUMNS tuples, in start then insertion order) and
    the figures of all of them: count, dollars (micro-dollars) and quantity per unit."""

    rows: list[Sequence[Any]] = field(default_factory=list)
    count: int = 0
    cost_micros: int = 0
    quantity: dict[str, float] = field(default_factory=dict)


class StoreError(ProvisionerError):
    """A store operation could not be carried out as asked."""

    http_status = 409


class NotFound(StoreError, LookupError):
    """No record with that key."""

    http_status = 404


class FencedOut(StoreError):
    """A write or an action carried a fencing token that is no longer the leader's. Never
    retried by the one who got it: that controller is no longer the leader."""

    http_status = 503


class ConcurrentUpdate(StoreError):
    """Someone else moved a watermark since it was read; nothing was written. Reading again
    and retrying is safe."""

    retryable = True


class IntentLog(Protocol):
    """Intent first: what is about to be asked of a cloud is written before the call, with the
    idempotency token the call carries, and settled (confirmed or failed) after it. After a
    crash `pending_intents()` lists the calls that may or may not have happened."""

    def record_intent(self, intent: NewIntent) -> Intent:
        """Write a pending intent before the cloud call. Idempotent per token: recording the
        same token again returns the intent already stored, unchanged. An empty token is a
        `StoreError`. Fenced."""
        ...

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
        """The call took effect: store the instances it created and the lifecycle steps it
        caused and mark the intent confirmed, all or nothing. `category`: the error a partly
        filled call met (the shortfall's). Confirming twice stores no instance twice and keeps
        the first completion time. `NotFound` for an unknown token. Fenced."""
        ...

    def fail_intent(
        self,
        token: str,
        now_ts: float,
        error_code: str,
        error: str = "",
        *,
        category: ErrorCategory | None = None,
    ) -> Intent:
        """The call failed or never happened. Only a pending intent changes: a settled one is
        returned as it is. `category`, from the typed error, is what the back-off is rebuilt
        from; without one the intent's `error_category` stays None, as for an intent written
        before categories were kept. `NotFound` for an unknown token. Fenced."""
        ...

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
        """A confirmed scale-up whose launch the cloud failed after the confirmation (a late
        failure): `missing` of the nodes it added will never come. `result.added` drops by
        `missing` (never below 0); the shortfall's code (`result.shortfall_code` and
        `error_code`), text, category and time (`result.late_failure_ts`) are kept, so the
        placeholders stop counting those nodes and the back-off is rebuilt from them. Only a
        confirmed intent with no shortfall yet changes; any other is returned as it is.
        `NotFound` for an unknown token. Fenced."""
        ...

    def intent(self, token: str) -> Intent | None:
        """The intent of `token`, or None."""
        ...

    def pending_intents(self, kind: IntentKind | str | None = None) -> list[Intent]:
        """Intents not settled yet, oldest first, optionally of one kind."""
        ...

    def intents(
        self,
        *,
        kind: IntentKind | str | None = None,
        status: IntentStatus | str | None = None,
        since_ts: float | None = None,
        limit: int | None = None,
    ) -> list[Intent]:
        """Intents, oldest first (then by token), filtered by kind, status and creation time
        (`created_ts >= since_ts`), at most `limit`. The loop reads recent scale-ups to adopt
        the instances they launched and to rebuild the back-off."""
        ...

    def first_intent_ts(self, kind: IntentKind | str) -> float | None:
        """When the oldest intent of `kind` was recorded (None: there is none): nothing of that
        kind was asked for before it."""
        ...

    def failed_intent_counts(self, kind: IntentKind | str = IntentKind.SCALE_UP) -> dict[str, int]:
        """Failed intents of `kind` per error code ('unknown' for none)."""
        ...


class InstanceRepo(Protocol):
    """The cloud instances this controller owns, with each one's lifecycle history. The stored
    state is a cache of the world: moves follow the domain's transition table."""

    def add_instance(
        self, inst: CloudInstance, *, team: str = "", intent_token: str = ""
    ) -> StoredInstance:
        """Store an instance found by passive sync (by tag). One already stored is kept as it
        is. Fenced."""
        ...

    def transition(
        self,
        instance_id: str,
        to: InstanceState,
        at_ts: float,
        reason: str,
        *,
        cloud_ts: float | None = None,
    ) -> CloudInstance:
        """Move an instance along the transition table and record the step (a move to the
        state it is in changes nothing). `cloud_ts`: the cloud's own stamp for the step,
        translated and clamped (billing starts or ends there). `IllegalTransition` for a step
        the table forbids, `TransitionOutOfOrder` for one dated before the step it follows
        (nothing is written), `NotFound` for an unknown instance. Fenced."""
        ...

    def set_node_name(self, instance_id: str, node_name: str) -> None:
        """Name the Slurm node of an instance. `NotFound` for an unknown instance. Fenced."""
        ...

    def instance(self, instance_id: str) -> StoredInstance | None:
        """The instance with its history, or None."""
        ...

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
        """Instances in launch order (then by id), filtered. `needs_billing`: the accountant's
        work list (alive, or not yet billed to its end or to the 60 s minimum)."""
        ...

    def timed_out(
        self, now_ts: float, timeouts: Mapping[InstanceState, float] | None = None
    ) -> list[CloudInstance]:
        """Instances that stayed in their state longer than its timeout (default: the
        domain's per-state timeouts; a state with no timeout never times out)."""
        ...

    def instance_counts(self) -> dict[str, int]:
        """The number of instances per state; states with none are absent."""
        ...

    def cloud_usd_per_hour(self) -> Decimal:
        """$/h of every instance requested or alive, capacity in flight included."""
        ...


class DecisionLog(Protocol):
    """The planner's decisions, kept with their reasons and the offers they weighed, and the
    IaC review attached to a decision."""

    def record_decisions(self, decisions: Iterable[Decision], created_ts: float) -> int:
        """Store decisions, all or nothing; returns how many were given. Ids are deterministic:
        recording an id again replaces its content but keeps its first `created_ts` and its
        IaC review. `detail` values are kept as strings. Fenced."""
        ...

    def set_iac_review(
        self, decision_id: str, review: str | Mapping[str, Any], fmt: str = ""
    ) -> bool:
        """Attach an IaC review: text (format `fmt` or 'text') or a mapping, kept as JSON with
        sorted keys (format `fmt` or 'json'). False: no such decision."""
        ...

    def decision(self, decision_id: str) -> StoredDecision | None:
        """One decision, or None."""
        ...

    def decisions(
        self,
        *,
        from_ts: float | None = None,
        to_ts: float | None = None,
        reason: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[StoredDecision]:
        """Decisions created in [from_ts, to_ts) with `reason` (any when empty), newest first,
        ties by id, a page of `limit` after `offset`."""
        ...

    def decision_counts(self) -> dict[str, int]:
        """The number of decisions per stored reason code."""
        ...


class Ledger(Protocol):
    """Job usage (a job's time on a node), the priced ledger rows and the report queries over
    them. Every dollar is kept to the micro-dollar; a ledger row lies within one UTC day.

    Writes are all-or-nothing: a batch with one bad entry (ending before it starts, straddling
    a UTC midnight, a cost or unit price over $10M) raises `StoreError` and writes nothing;
    `commit_billing` moves its watermarks and writes its rows together or not at all."""

    def record_job_usage(self, usages: Iterable[JobUsage]) -> int:
        """Upsert usage records keyed by (job, node, start), all or nothing; returns how many
        were given. An update keeps the record's id and billing watermark. Fenced."""
        ...

    def end_job(self, job_id: str, end_ts: float) -> int:
        """Close every open usage record of a job; returns how many were closed. Fenced."""
        ...

    def job_usage(
        self,
        *,
        node_name: str | None = None,
        instance_id: str | None = None,
        onprem_only: bool = False,
        overlapping: tuple[float, float] | None = None,
        unbilled_at: float | None = None,
    ) -> list[JobUsage]:
        """Usage records in start order (then by id), each with its id and watermark.
        `overlapping=(a, b)`: started before b and not ended by a. `unbilled_at=now`: started
        before `now` with time the ledger has not covered (running, or billed short of the
        end). `onprem_only`: no instance."""
        ...

    def add_ledger(self, entries: Iterable[LedgerEntry]) -> int:
        """Append ledger rows, all or nothing; returns how many. Fenced."""
        ...

    def commit_billing(
        self,
        entries: Sequence[LedgerEntry],
        *,
        instance_marks: Sequence[BillingMark] = (),
        usage_marks: Sequence[BillingMark] = (),
    ) -> int:
        """Append ledger rows and move billing watermarks (an instance's billed-until and
        billed seconds, a usage record's billed-until), all or nothing; returns the rows
        written. A watermark that is not at its mark's `expected` any more raises
        `ConcurrentUpdate`; an unknown instance or usage id raises `NotFound`. Fenced."""
        ...

    def ledger_total(self, from_ts: float | None = None, to_ts: float | None = None) -> Decimal:
        """The cost of the rows starting in [from_ts, to_ts), to the micro-dollar."""
        ...

    def grouped_costs(
        self, group_by: Sequence[str], from_ts: float, to_ts: float, kinds: Sequence[str] = ()
    ) -> dict[tuple[str, ...], tuple[Decimal, int]]:
        """(cost, row count) of the rows starting in [from_ts, to_ts), optionally only of
        `kinds`, per tuple of the `group_by` values (each as text) among 'day', the ledger
        dimensions (kind, team, account, user, partition, cloud, region, pool), 'node_name'
        and 'gpu_part'. Groups with no row are absent."""
        ...

    def spend_by_team(
        self, from_ts: float, to_ts: float, kinds: Sequence[str]
    ) -> dict[str, Decimal]:
        """Cost of `kinds` per team over the whole UTC days [day_of(from), day_of(to)); teams
        with no row are absent."""
        ...

    def instance_costs(
        self, from_ts: float, to_ts: float, kinds: Sequence[str]
    ) -> dict[str, tuple[Decimal, Decimal]]:
        """Per cloud instance with rows of `kinds` starting in [from_ts, to_ts): (its cost, the
        part of it of kind job): which instances ever ran a job, and what the others cost."""
        ...

    def ledger_export(
        self, from_ts: float | None = None, to_ts: float | None = None, *, chunk_rows: int = 2000
    ) -> Iterator[Sequence[Sequence[Any]]]:
        """The rows starting in [from_ts, to_ts), in start order (then insertion order), as
        tuples of `EXPORT_COLUMNS` (kind as text, money as integer
        micro-dollars), in chunks of `chunk_rows` (the last may be shorter; none when empty)."""
        ...

    def ledger_page(self, f: LedgerFilter, offset: int = 0, limit: int = 50) -> LedgerPage:
        """The rows `f` matches from `offset` (at most `limit`), and the figures of every one
        of them. The database filters and sums (a figure's rows, not the whole window, reach
        Python). A column outside FILTER_COLUMNS raises InvalidArgument."""
        ...

    def ledger_entries(
        self, *, instance_id: str | None = None, job_id: str | None = None
    ) -> list[LedgerEntry]:
        """Ledger rows, in start order (then insertion order), filtered."""
        ...

    def job_costs(self, job_ids: Collection[str]) -> dict[str, Decimal]:
        """Each given job's dollars in the ledger (all kinds, all time), summed exactly; a
        job with no row is left out."""
        ...


class TokenRepo(Protocol):
    """API tokens as salted hashes; the secret never reaches the store."""

    def add_token(self, rec: TokenRecord) -> None:
        """Store a token as given. A token id already stored is refused with `StoreError` and
        the stored token kept."""
        ...

    def token(self, token_id: str) -> TokenRecord | None:
        """One token, revoked or not, or None."""
        ...

    def tokens(self) -> list[TokenRecord]:
        """Every token, oldest first, ties by id."""
        ...

    def revoke_token(self, token_id: str, now_ts: float) -> bool:
        """Revoke a token at `now_ts`; revoking again keeps the first time. False: no such
        token."""
        ...


class PolicyRepo(Protocol):
    """What policy and the operator set: the burst pools (as policy declares them, plus the
    operator's drain flag), the operator's switches (pause, the sweep's hold and go-ahead) and
    the budgets."""

    def sync_pools(self, pools: Iterable[PoolPolicy], now_ts: float) -> None:
        """Upsert the pools declared in policy, all or nothing. A pool already stored takes
        policy's fields and keeps the operator's drain flag (with its time and author); a new
        one starts undrained. A pool no longer declared is kept. No `gpu_model` is kept as
        ''."""
        ...

    def pools(self) -> list[PoolInfo]:
        """Every stored pool, by name."""
        ...

    def pool(self, name: str) -> PoolInfo | None:
        """One pool, or None."""
        ...

    def set_pool_drained(
        self, name: str, drained: bool, now_ts: float, by: str = ""
    ) -> PoolInfo | None:
        """Drain (or undrain) a pool: no new scale-ups, its nodes drained. Draining stamps
        `drained_ts` with `now_ts` and `drained_by` with `by`; undraining clears them (None,
        ''). Returns the pool as it stands afterwards. None: no such pool (nothing stored)."""
        ...

    def operator_state(self) -> OperatorState:
        """The operator's switches and the names of the drained pools (in no promised order).
        Before any switch was set, the defaults: not paused, no reason, `updated_ts` 0.0, no
        sweep hold, no go-ahead."""
        ...

    def claim_controller_id(self, proposed: str) -> str:
        """This installation's controller identity, which every cloud resource it makes is
        tagged with: the one stored, or `proposed`, stored now, when none is. The first claim
        wins, also when both controllers of an HA pair start at once; an empty `proposed` is
        a `StoreError`."""
        ...

    def set_paused(self, paused: bool, now_ts: float, by: str = "", reason: str = "") -> None:
        """Pause (or resume) the controller's scale-ups, stamped with `now_ts` and `by`.
        `reason` replaces the one stored, kept to its first 500 characters."""
        ...

    def set_sweep_hold(self, reason: str, now_ts: float) -> None:
        """The sweep's safety valve: hold (a reason) or release (""). A hold keeps its start
        time while it lasts (a new reason during it replaces the text only), so an operator's
        go-ahead given during it stays valid; a release clears it. `reason` is kept to its
        first 500 characters. Fenced."""
        ...

    def approve_sweep(self, now_ts: float, by: str) -> None:
        """An operator checked the disagreement and lets the held sweep go ahead: the go-ahead
        (stamped `now_ts`, `by`) counts for a hold that started at or before it
        (`OperatorState.sweep_approved`)."""
        ...

    def sync_budgets(self, budgets: Budgets, now_ts: float) -> None:
        """Replace the stored budgets by those in policy, all or nothing: the global $/h
        (scope 'global', name '*', when policy sets one) and each team's monthly $ (scope
        'team', name the team). Every other stored budget is deleted."""
        ...

    def budgets(self) -> list[BudgetRecord]:
        """The stored budgets by scope, then name, the amounts exactly as given."""
        ...


class TelemetryRepo(Protocol):
    """GPU telemetry pushed by the node agents: the latest sample of each GPU, the latest whole
    payload of each node, and the energy watermarks, moved together with the energy ledger rows
    they price."""

    def upsert_telemetry(self, node: str, samples: Iterable[GpuSample], received_ts: float) -> int:
        """Keep the latest sample of each GPU of `node` (by index), all or nothing: a sample
        older than the one stored never overwrites it (one as old does). The node's GPU set is
        its latest sample's: stored GPUs of `node` that the samples lack, and no newer than
        them, are forgotten. Returns how many of the samples given were kept."""
        ...

    def prune_telemetry(self, before_ts: float) -> int:
        """Forget GPUs and payloads received before `before_ts` and energy marks last moved
        (`commit_energy`'s `now_ts`) before it: telemetry retention. Returns how many were
        forgotten, the three kinds together. A node that comes back starts again from a fresh
        energy baseline."""
        ...

    def telemetry(self, node: str | None = None) -> list[NodeTelemetry]:
        """The latest samples, per node (or of `node` only), by node, each node's GPUs by
        index; a node's `received_ts` is the latest of its GPUs'."""
        ...

    def put_telemetry_payload(
        self,
        node: str,
        sampled_ts: float,
        received_ts: float,
        payload: Mapping[str, Any],
        idle_since: Mapping[int, float],
    ) -> bool:
        """Keep a node's latest whole payload (as JSON: it reads back with lists for tuples),
        with since when each GPU index has been idle. An older sample never overwrites a newer
        one (False: not stored); one as old does."""
        ...

    def telemetry_payloads(self, node: str | None = None) -> list[StoredPayload]:
        """The latest payload of each node (or of `node` only), by node."""
        ...

    def energy_marks(self, node: str | None = None) -> dict[tuple[str, str], EnergyMark]:
        """Energy watermarks keyed by (node, gpu_key), of every node or of `node` only."""
        ...

    def commit_energy(
        self,
        entries: Sequence[LedgerEntry],
        marks: Sequence[tuple[EnergyMark | None, EnergyMark]],
        now_ts: float,
    ) -> int:
        """Write energy ledger rows and move the GPUs' energy watermarks together, all or
        nothing; returns the rows written. Each mark is (what was read, None if there was none;
        the new one): a watermark whose `sampled_ts` is not what was read any more aborts the
        whole write with `ConcurrentUpdate`; an entry the ledger refuses (see `Ledger`) with
        `StoreError`. The marks moved are stamped `now_ts`. Fenced."""
        ...


class Fencing(Protocol):
    """The check a controller makes before a cloud or Slurm call: does it still lead?

    `fence` is what its writes carry: set by a controller in HA mode
    (`provisioner.reconcile.leadership`) to the lease term it holds, None for a lone
    controller, which has nothing to check."""

    fence: Fence | None

    def check_fence(self) -> None:
        """Refuse with `FencedOut` unless this store's fence is the current, unexpired lease
        (same holder and token, not expired by the store's clock); renew the lease when it is
        (it then expires no sooner than now plus the fence's ttl). A refusal is counted on the
        lease (`Lease.refused`). No fence: nothing to check."""
        ...


class LeaderLease(Fencing, Protocol):
    """The leader lease: which controller may act. One lease per name, with a holder, an expiry
    and a fencing token. Taking the lease, the first time, from another holder or after it
    lapsed (even by the same holder), starts a new term: the token grows by one. Renewing a
    lease one holds keeps the token.

    Expiry is judged by the store's clock (`db_now`): the database's for the SQL store, so
    controllers on hosts whose clocks disagree still agree on who leads; an injected one in
    memory. It is exclusive: at `expires_ts` the lease is free."""

    def db_now(self) -> float:
        """The store's clock, the one leases are judged by (UTC seconds)."""
        ...

    def acquire_lease(self, name: str, holder: str, ttl_s: float) -> Lease:
        """Take or renew lease `name` for `holder`, to expire `ttl_s` seconds from now, when it
        is free, expired or already `holder`'s; otherwise change nothing. Returns the lease as
        it stands afterwards (the caller leads when `lease.holder == holder`). A new term has
        the next token (1 for a lease never held) and `acquired_ts` now; a renewal keeps both.
        A `ttl_s` not above 0 is a `StoreError`."""
        ...

    def release_lease(self, name: str, holder: str, token: int) -> bool:
        """Give the lease up (a clean stop) so a standby need not wait for it to expire: it
        expires now (or stays expired), keeping its holder and token. False, changing nothing:
        no such lease, or it is not `holder`'s term `token`."""
        ...

    def lease(self, name: str) -> Lease | None:
        """Lease `name` as it stands, or None."""
        ...


class RuntimeHistory(Protocol):
    """The learned runtime history (`provisioner.plan.history`), kept so a restart does not
    forget it: per name ("user:ann", "group:cv", a partition), its last few completed
    runtimes, oldest first."""

    def runtime_history(self) -> dict[str, list[float]]:
        """Every stored name's runtimes, oldest first, as floats."""
        ...

    def save_runtime_history(self, entries: Mapping[str, Sequence[float]], now_ts: float) -> None:
        """Replace the runtimes of the given names, all or nothing; other names are left as
        they are. Nothing given: nothing written. Fenced: a lapsed leader's learning is
        refused too."""
        ...


class JobHistory(Protocol):
    """The jobs table (`provisioner.domain.job_records`): one record per job id, as Slurm last
    showed it, kept for `Policy.jobs.retention_days` after it closed."""

    def record_jobs(self, records: Sequence[JobRecord]) -> int:
        """Insert or update each record, all or nothing. An update keeps the stored
        `first_seen_ts`, and the stored prediction when the record has none (a job predicted
        while pending keeps it once running); a record not newer (`last_seen_ts`) than the
        stored one changes nothing, so a lapsed controller's older view cannot undo a newer
        one. `instance_ids` accumulate: an instance a job ran on stays listed after it ended
        (Slurm still lists the job, and its node, when the instance is gone). Fenced. Returns
        how many were written."""
        ...

    def close_missing_jobs(self, listed: Collection[str], now_ts: float) -> int:
        """Close the open (pending, running) jobs that a complete listing no longer holds: as
        `gone`, a running one ending at `now_ts`. Fenced. Returns how many were closed."""
        ...

    def job_records(
        self,
        *,
        states: Collection[str] | None = None,
        team: str | None = None,
        partition: str | None = None,
        placement: str | None = None,
        ran_on: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[JobRecord]:
        """Newest submit first (then job id). `since`/`until`: jobs alive in [since, until),
        that is submitted before `until` and open, or ended (else last seen) at or after
        `since`. `placement`: where it ran ("cloud", "onprem", "" for not yet). `ran_on`: a
        node name or instance id among those it ran on (an instance's jobs)."""
        ...

    def job_record(self, job_id: str) -> JobRecord | None:
        """The record of `job_id`, None when never seen (or pruned)."""
        ...

    def prune_jobs(self, before_ts: float) -> int:
        """Forget closed jobs last seen before `before_ts`; open jobs are kept whatever their
        age. Returns how many were forgotten."""
        ...


class ClockMarks(Protocol):
    """The controller's clock marks and the clouds' measured skew.

    A clock mark per host boot: where that boot's controller clock stood on its monotonic clock
    at its last pass (`provisioner.clock.ClockMark`). A restart on the same boot carries the
    clock on from it; the highest `ts` is the floor no lifecycle stamp goes below. A skew per
    cloud account: the cloud's clock minus the controller's, as last measured, for /metrics
    and `provisioner doctor`."""

    def save_clock_mark(self, mark: ClockMark) -> None:
        """Keep where this boot's clock stands, replacing the boot's earlier mark. Fenced: a
        lapsed leader's mark is refused too."""
        ...

    def clock_mark(self, boot_id: str) -> ClockMark | None:
        """The mark of boot `boot_id`, or None."""
        ...

    def latest_clock_ts(self) -> float:
        """The latest time any controller's clock stood at on this store: the highest `ts` of
        every boot's mark (0.0: none yet)."""
        ...

    def save_cloud_skews(self, estimates: Sequence[SkewEstimate]) -> None:
        """Keep the latest estimate per (cloud, account), replacing an earlier one, all or
        nothing; the agreed span (`lo_s`, `hi_s`) is not kept. Nothing given: nothing written.
        Fenced."""
        ...

    def cloud_skews(self) -> list[SkewEstimate]:
        """The kept estimates by cloud, then account (`lo_s` and `hi_s` read back as 0.0)."""
        ...


class GpuUsageLog(Protocol):
    """NVML-observed GPU time per UTC hour, GPU and job (domain/gpu_usage.py): the "used"
    side of the efficiency views. Rows of one key add up; they are never rewritten."""

    def add_gpu_usage(self, rows: Iterable[GpuUsage]) -> int:
        """Add each row's seconds to its (hour, node, GPU, job) key. All or nothing. Not fenced:
        a standby's API takes telemetry too.
        Returns the number of keys written."""
        ...

    def gpu_usage(self, from_ts: float, to_ts: float) -> list[GpuUsage]:
        """The rows of the hours starting in [from_ts, to_ts), by hour, node, GPU and job."""
        ...

    def prune_gpu_usage(self, before_ts: float) -> int:
        """Forget the hours that started before `before_ts`; how many rows went."""
        ...


class ControllerStore(
    IntentLog,
    InstanceRepo,
    DecisionLog,
    Ledger,
    TokenRepo,
    PolicyRepo,
    TelemetryRepo,
    LeaderLease,
    RuntimeHistory,
    ClockMarks,
    JobHistory,
    GpuUsageLog,
    Protocol,
):
    """The whole store as the reconcile loop's context sees it: every port above on one
    database (`provisioner.store.Store`)."""

    # The engine the store runs on ("sqlite", "postgresql"), for what differs between them.
    dialect: str

    def close(self) -> None:
        """Let go of the store's connections; the store is not used afterwards."""
        ...
