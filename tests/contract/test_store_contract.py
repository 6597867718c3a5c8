"""The store's contract suites, one per Protocol (`provisioner.ports.store`): `DecisionLog` and
`TokenRepo` here; `IntentLog` and `InstanceRepo` in test_store_instances_contract.py, `Ledger`
in test_store_ledger_contract.py, `PolicyRepo` in test_store_policy_contract.py,
`TelemetryRepo` in test_store_telemetry_contract.py, `LeaderLease` and `Fencing` in
test_store_lease_contract.py, `RuntimeHistory` and `ClockMarks` in
test_store_runtime_clock_contract.py. Each test runs against the in-memory class
(`provisioner.store.memory`), the SQLite store and, where PROVISIONER_TEST_DATABASE_URL names a
server, the PostgreSQL store.

Every expected value is computed by hand in the test (see the comments), never by billing code.

Each module overrides the root `db_backend` fixture to add "memory" to the engines: the SQL
variants still take their databases from the root `db_url`, and the root conftest still marks
the PostgreSQL ones `postgres`. `open_impl` builds one implementation of all three Protocols.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, TypeVar

import pytest

from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import Alternative, Decision, ReasonCode, Rejection
from provisioner.domain.records import StoredDecision, TokenRecord
from provisioner.ports.store import DecisionLog, Ledger, TokenRepo
from provisioner.store import Store, StoreError
from provisioner.store.memory import MemoryDecisionLog, MemoryLedger, MemoryTokenRepo
from tests.databases import BACKENDS

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a UTC midnight
H = 3_600.0
DAY = 86_400.0
T = TypeVar("T")
SPOT = OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT)
ON_DEMAND = OfferKey("gcp", "us-central1", "a2-highgpu-8g", CapacityType.ON_DEMAND)
# The implementations every contract test runs on: the values of `db_backend` here.
IMPLEMENTATIONS = ["memory", *BACKENDS]


# ----------------------------------------------------------------------------- implementations


@dataclass
class Impl:
    """One implementation of the three Protocols, plus the instance records that
    `commit_billing` moves (kept by the instance repository in the SQL store)."""

    decisions: DecisionLog
    tokens: TokenRepo
    ledger: Ledger
    add_instance: Callable[[str], None]
    instance_billing: Callable[[str], tuple[float | None, float]]


@contextmanager
def open_impl(backend: str, request: pytest.FixtureRequest) -> Iterator[Impl]:
    """The in-memory classes, or a `Store` on a fresh database of the root `db_url`."""
    if backend == "memory":
        ledger = MemoryLedger()
        yield Impl(
            MemoryDecisionLog(),
            MemoryTokenRepo(),
            ledger,
            ledger.track_instance,
            ledger.instance_billing,
        )
        return
    store = Store(request.getfixturevalue("db_url"))

    def add_instance(instance_id: str) -> None:
        store.add_instance(
            CloudInstance(
                instance_id=instance_id,
                pool="aws-a100",
                offer=SPOT,
                gpu_model="A100",
                gpus=8,
                price_usd_hr=Decimal("10"),
                state=InstanceState.ALLOCATED,
                launched_ts=T0,
            )
        )

    def instance_billing(instance_id: str) -> tuple[float | None, float]:
        si = store.instance(instance_id)
        assert si is not None
        return si.billed_until_ts, si.billed_seconds

    try:
        yield Impl(store, store, store, add_instance, instance_billing)
    finally:
        store.close()


def failing_after(items: list[T], error: Exception) -> Iterator[T]:
    """The items, then `error`: a batch that breaks half-way."""
    yield from items
    raise error


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def decisions(db_backend: str, request: pytest.FixtureRequest) -> Iterator[DecisionLog]:
    with open_impl(db_backend, request) as impl:
        yield impl.decisions


@pytest.fixture
def tokens(db_backend: str, request: pytest.FixtureRequest) -> Iterator[TokenRepo]:
    with open_impl(db_backend, request) as impl:
        yield impl.tokens


# ----------------------------------------------------------------------------- DecisionLog


def make_decision(
    decision_id: str, reason: ReasonCode = ReasonCode.BURST_URGENT, **kw: Any
) -> Decision:
    return Decision(decision_id=decision_id, reason=reason, **kw)


def full_decision() -> Decision:
    return Decision(
        decision_id="d-full",
        reason=ReasonCode.BURST_WAIT_EXCEEDS_BUDGET,
        job_ids=("1", "2"),
        chosen=SPOT,
        alternatives=(
            Alternative(SPOT, Decimal("12.50"), Decimal("25.000"), chosen=True),
            Alternative(
                ON_DEMAND, Decimal("29.4"), Decimal("58.8"), rejected_because=Rejection.COSTLIER
            ),
            Alternative(ON_DEMAND, Decimal("1"), Decimal("2")),
        ),
        predicted_wait_s=7200.0,
        wait_budget_s=1800.0,
        wait_saved_s=5400.0,
        global_headroom_usd_hr=Decimal("87.50"),
        team_headroom_usd=Decimal("1000"),
        team="vision",
        detail={"note": "x"},
    )


def test_a_decision_reads_back_as_recorded(decisions: DecisionLog) -> None:
    d = full_decision()
    assert decisions.record_decisions([d], T0) == 1
    got = decisions.decision("d-full")
    assert got is not None
    assert got.decision == d
    assert got.created_ts == T0
    assert got.reason == "burst_wait_exceeds_budget"
    assert (got.iac_review, got.iac_review_format) == (None, "")
    # The Decimals keep their exact text.
    assert str(got.decision.alternatives[0].usd_per_hour) == "12.50"
    assert str(got.decision.global_headroom_usd_hr) == "87.50"


def test_an_unknown_decision_is_none(decisions: DecisionLog) -> None:
    assert decisions.decision("d-none") is None
    assert decisions.decisions() == []
    assert decisions.decision_counts() == {}


def test_a_decision_keeps_job_ids_as_a_tuple_and_details_as_text(decisions: DecisionLog) -> None:
    d = make_decision("d-1", job_ids=["7", "8"], detail={"n": 3, "lower_bound": True})
    decisions.record_decisions([d], T0)
    got = decisions.decision("d-1")
    assert got is not None
    assert got.decision.job_ids == ("7", "8")
    assert dict(got.decision.detail) == {"n": "3", "lower_bound": "True"}


def test_changing_a_decision_read_back_changes_nothing_stored(decisions: DecisionLog) -> None:
    decisions.record_decisions([make_decision("d-1", detail={"k": "v"})], T0)
    got = decisions.decision("d-1")
    assert got is not None
    got.decision.detail["k"] = "changed"  # type: ignore[index]
    (listed,) = decisions.decisions()
    listed.decision.detail["k"] = "changed"  # type: ignore[index]
    again = decisions.decision("d-1")
    assert again is not None and dict(again.decision.detail) == {"k": "v"}


def test_recording_an_id_again_replaces_it_but_keeps_its_time_and_review(
    decisions: DecisionLog,
) -> None:
    decisions.record_decisions([make_decision("d-1", team="a")], T0)
    assert decisions.set_iac_review("d-1", "plan: +1 asg")
    # The same id twice in a batch, and once more later: each one given is counted.
    n = decisions.record_decisions(
        [make_decision("d-1", team="b"), make_decision("d-2"), make_decision("d-1", team="c")],
        T0 + 10,
    )
    assert n == 3
    got = decisions.decision("d-1")
    assert got is not None
    assert got.decision.team == "c"
    assert got.created_ts == T0
    assert (got.iac_review, got.iac_review_format) == ("plan: +1 asg", "text")
    d2 = decisions.decision("d-2")
    assert d2 is not None and d2.created_ts == T0 + 10
    assert decisions.decision_counts() == {"burst_urgent": 2}


def test_a_batch_that_breaks_half_way_records_nothing(decisions: DecisionLog) -> None:
    decisions.record_decisions([make_decision("d-0")], T0)
    batch = failing_after([make_decision("d-1"), make_decision("d-0", team="x")], RuntimeError())
    with pytest.raises(RuntimeError):
        decisions.record_decisions(batch, T0 + 1)
    assert decisions.decision("d-1") is None
    kept = decisions.decision("d-0")
    assert kept is not None and kept.decision.team == ""


def test_iac_review_text_json_and_format(decisions: DecisionLog) -> None:
    decisions.record_decisions([make_decision("d-1"), make_decision("d-2")], T0)
    assert decisions.set_iac_review("d-1", {"resources": ["asg"], "create": 1})
    got = decisions.decision("d-1")
    assert got is not None
    # A mapping is kept as JSON with sorted keys.
    assert got.iac_review == '{"create": 1, "resources": ["asg"]}'
    assert got.iac_review_format == "json"
    assert decisions.set_iac_review("d-2", "~ update", fmt="diff")
    got = decisions.decision("d-2")
    assert got is not None and (got.iac_review, got.iac_review_format) == ("~ update", "diff")
    # A later review replaces the earlier one.
    assert decisions.set_iac_review("d-1", "again")
    got = decisions.decision("d-1")
    assert got is not None and (got.iac_review, got.iac_review_format) == ("again", "text")
    assert not decisions.set_iac_review("d-none", "text")
    assert decisions.decision("d-none") is None


def _ids(rows: list[StoredDecision]) -> list[str]:
    return [r.decision.decision_id for r in rows]


def test_decisions_newest_first_ties_by_id_half_open_window_and_paging(
    decisions: DecisionLog,
) -> None:
    decisions.record_decisions([make_decision("d-b"), make_decision("d-a")], T0)
    decisions.record_decisions([make_decision("d-c", ReasonCode.SCALE_DOWN_IDLE)], T0 + 10)
    decisions.record_decisions([make_decision("d-d")], T0 + 20)
    assert _ids(decisions.decisions()) == ["d-d", "d-c", "d-a", "d-b"]
    # [from, to): from is in, to is out.
    assert _ids(decisions.decisions(from_ts=T0 + 10)) == ["d-d", "d-c"]
    assert _ids(decisions.decisions(to_ts=T0 + 10)) == ["d-a", "d-b"]
    assert _ids(decisions.decisions(from_ts=T0, to_ts=T0 + 20)) == ["d-c", "d-a", "d-b"]
    assert _ids(decisions.decisions(reason="burst_urgent")) == ["d-d", "d-a", "d-b"]
    assert _ids(decisions.decisions(reason="scale_down_idle")) == ["d-c"]
    assert _ids(decisions.decisions(reason="")) == ["d-d", "d-c", "d-a", "d-b"]  # any reason
    assert _ids(decisions.decisions(reason="join_timeout")) == []
    assert _ids(decisions.decisions(limit=2)) == ["d-d", "d-c"]
    assert _ids(decisions.decisions(limit=2, offset=2)) == ["d-a", "d-b"]
    assert _ids(decisions.decisions(limit=2, offset=3)) == ["d-b"]
    assert _ids(decisions.decisions(offset=4)) == []
    assert decisions.decision_counts() == {"burst_urgent": 3, "scale_down_idle": 1}


# ----------------------------------------------------------------------------- TokenRepo


def make_token(token_id: str, created_ts: float = T0, **kw: Any) -> TokenRecord:
    return TokenRecord(token_id, f"name-{token_id}", "viewer", "salt", "hash", created_ts, **kw)


def test_a_token_reads_back_as_stored(tokens: TokenRepo) -> None:
    agent = TokenRecord(
        "t-agent", "gpu-7", "agent", "s4lt", "h4sh", T0, node="gpu-7", expires_ts=T0 + DAY
    )
    tokens.add_token(agent)
    assert tokens.token("t-agent") == agent
    assert tokens.token("t-none") is None
    assert tokens.tokens() == [agent]


def test_tokens_oldest_first_ties_by_id(tokens: TokenRepo) -> None:
    for rec in (make_token("t-c", T0 + 5), make_token("t-b", T0), make_token("t-a", T0)):
        tokens.add_token(rec)
    assert [t.token_id for t in tokens.tokens()] == ["t-a", "t-b", "t-c"]


def test_revoking_keeps_the_token_and_the_first_time(tokens: TokenRepo) -> None:
    tokens.add_token(make_token("t-1"))
    tokens.add_token(make_token("t-2"))
    assert tokens.revoke_token("t-1", T0 + 1)
    assert tokens.revoke_token("t-1", T0 + 2)  # again: still true, time unchanged
    got = tokens.token("t-1")
    assert got is not None and got.revoked_ts == T0 + 1
    assert [t.revoked_ts for t in tokens.tokens()] == [T0 + 1, None]
    assert not tokens.revoke_token("t-none", T0)
    assert tokens.token("t-none") is None


def test_a_token_created_revoked_is_kept_so(tokens: TokenRepo) -> None:
    tokens.add_token(make_token("t-1", revoked_ts=T0 - 5))
    assert tokens.revoke_token("t-1", T0)
    got = tokens.token("t-1")
    assert got is not None and got.revoked_ts == T0 - 5


def test_a_token_id_is_not_stored_twice(tokens: TokenRepo) -> None:
    first = make_token("t-1")
    tokens.add_token(first)
    with pytest.raises(StoreError):
        tokens.add_token(replace(first, role="admin", created_ts=T0 + 1))
    assert tokens.token("t-1") == first
    assert tokens.tokens() == [first]
