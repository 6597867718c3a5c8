"""The store's repositories as narrow Protocols, so a caller can say which slice of the store it
needs and a test can hand it a small in-memory one (`provisioner.store.memory`).

Each Protocol repeats the signatures of one store concern exactly (`store/instances.py`,
`decisions.py`, `ledger.py`, `tokens.py`); `provisioner.store.Store` satisfies every one of
them, which mypy checks in `provisioner.store`. The behaviour each promises is pinned down by the
contract suite in `tests/contract/test_store_contract.py`, run against the in-memory classes,
SQLite and PostgreSQL alike.

Promises shared by all of them:

- Writes are all-or-nothing: a call that writes several rows either writes them all or, when
  it raises, none (for the SQL store, one transaction per call).
- Records handed out are frozen domain values (`provisioner.domain.records`); changing what a
  caller holds never changes what is stored.
- Errors are the store's typed ones (`StoreError`, `NotFound`, `ConcurrentUpdate`,
  `FencedOut`), never a driver's, except where a docstring says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol

from provisioner.domain.failures import ErrorCategory
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.intents import IntentKind, IntentStatus
from provisioner.domain.plan import Decision
from provisioner.domain.records import (
    BillingMark,
    Intent,
    JobUsage,
    LedgerEntry,
    NewIntent,
    StoredDecision,
    StoredInstance,
    TokenRecord,
)


class IntentLog(Protocol):
    """Intent first: what is about to be asked of a cloud is written before the call, with the
    idempotency token the call carries, and settled (confirmed or failed) after it. After a
    crash `pending_intents()` lists the calls that may or may not have happened."""

    def record_intent(self, intent: NewIntent) -> Intent:
        """Write a pending intent before the cloud call. Idempotent per token: recording the
        same token again returns the intent already stored, unchanged. An empty token is a
        `StoreError`."""
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
        caused and mark the intent confirmed, all or nothing. Confirming twice stores no
        instance twice and keeps the first completion time. `NotFound` for an unknown token."""
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
        returned as it is. `NotFound` for an unknown token."""
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
        (`created_ts >= since_ts`), at most `limit`."""
        ...

    def first_intent_ts(self, kind: IntentKind | str) -> float | None:
        """When the oldest intent of `kind` was recorded (None: there is none)."""
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
        """Store an instance found by passive sync. One already stored is kept as it is."""
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
        the table forbids, `TransitionOutOfOrder` for one dated before the step it follows,
        `NotFound` for an unknown instance."""
        ...

    def set_node_name(self, instance_id: str, node_name: str) -> None:
        """Name the Slurm node of an instance. `NotFound` for an unknown instance."""
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
        domain's per-state timeouts)."""
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
        IaC review. `detail` values are kept as strings."""
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
        were given. An update keeps the record's id and billing watermark."""
        ...

    def end_job(self, job_id: str, end_ts: float) -> int:
        """Close every open usage record of a job; returns how many were closed."""
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
        """Append ledger rows, all or nothing; returns how many."""
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
        `ConcurrentUpdate`; an unknown instance or usage id raises `NotFound`."""
        ...

    def ledger_total(self, from_ts: float | None = None, to_ts: float | None = None) -> Decimal:
        """The cost of the rows starting in [from_ts, to_ts), to the micro-dollar."""
        ...

    def grouped_costs(
        self, group_by: Sequence[str], from_ts: float, to_ts: float, kinds: Sequence[str] = ()
    ) -> dict[tuple[str, ...], tuple[Decimal, int]]:
        """(cost, row count) of the rows starting in [from_ts, to_ts), optionally only of
        `kinds`, per tuple of the `group_by` values (each as text) among 'day' and the ledger
        dimensions (kind, team, account, user, partition, cloud, region, pool). Groups with
        no row are absent."""
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
        part of it of kind job)."""
        ...

    def ledger_export(
        self, from_ts: float | None = None, to_ts: float | None = None, *, chunk_rows: int = 2000
    ) -> Iterator[Sequence[Sequence[Any]]]:
        """The rows starting in [from_ts, to_ts), in start order (then insertion order), as
        tuples of `store.ledger.EXPORT_COLUMNS` (kind as text, money as integer
        micro-dollars), in chunks of `chunk_rows` (the last may be shorter; none when empty)."""
        ...

    def ledger_entries(
        self, *, instance_id: str | None = None, job_id: str | None = None
    ) -> list[LedgerEntry]:
        """Ledger rows, in start order (then insertion order), filtered."""
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
