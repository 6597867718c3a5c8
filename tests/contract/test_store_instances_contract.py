"""The `IntentLog` and `InstanceRepo` contracts (`provisioner.ports.store`): intents written
before each cloud call and settled after it, and the instances they create with their
lifecycle history, on the in-memory class (`MemoryInstances`), SQLite and PostgreSQL alike (see
test_store_contract.py for how the engines are chosen). Every expected value is written out by
hand; the exhaustive transition table is tested in test_lifecycle_table.py, here only a few
moves through the repository."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal

import pytest
from test_store_contract import IMPLEMENTATIONS, SPOT, T0, H

from provisioner.domain.failures import ErrorCategory
from provisioner.domain.instances import (
    CloudInstance,
    IllegalTransition,
    InstanceOrigin,
    InstanceState,
    Transition,
)
from provisioner.domain.intents import IntentKind, IntentStatus, ScaleUpPayload, TerminatePayload
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.records import BillingMark, Intent, NewIntent, StoredInstance
from provisioner.ports.store import InstanceRepo, IntentLog, Ledger
from provisioner.store import NotFound, Store, StoreError
from provisioner.store.memory import MemoryInstances

S = InstanceState
ON_DEMAND = OfferKey("gcp", "us-central1", "a2-highgpu-8g", CapacityType.ON_DEMAND)
DAY_S = 86_400.0


# ----------------------------------------------------------------------------- implementations


@dataclass
class Impl:
    """One implementation of both Protocols (they share state: `confirm` stores instances),
    and the ledger whose `commit_billing` moves the instances' billing watermarks."""

    log: IntentLog
    repo: InstanceRepo
    ledger: Ledger


@contextmanager
def open_impl(backend: str, request: pytest.FixtureRequest) -> Iterator[Impl]:
    if backend == "memory":
        mem = MemoryInstances()
        yield Impl(mem, mem, mem.ledger)
        return
    store = Store(request.getfixturevalue("db_url"))
    try:
        yield Impl(store, store, store)
    finally:
        store.close()


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def impl(db_backend: str, request: pytest.FixtureRequest) -> Iterator[Impl]:
    with open_impl(db_backend, request) as it:
        yield it


@pytest.fixture
def log(impl: Impl) -> IntentLog:
    return impl.log


@pytest.fixture
def repo(impl: Impl) -> InstanceRepo:
    return impl.repo


def make_instance(
    instance_id: str,
    state: InstanceState = S.REQUESTED,
    *,
    launched_ts: float = T0,
    pool: str = "aws-a100",
    price: str = "32.7726",
    offer: OfferKey = SPOT,
    **kw: object,
) -> CloudInstance:
    return CloudInstance(
        instance_id=instance_id,
        pool=pool,
        offer=offer,
        gpu_model="A100",
        gpus=8,
        price_usd_hr=Decimal(price),
        state=state,
        launched_ts=launched_ts,
        decision_id="d-1",
        **kw,  # type: ignore[arg-type]
    )


def recorded(state: InstanceState, at: float = T0) -> Transition:
    """The one step the store writes for an instance stored without a history."""
    return Transition(None, state, at, "recorded")


# ----------------------------------------------------------------------------- IntentLog


def test_an_intent_reads_back_as_recorded(log: IntentLog) -> None:
    got = log.record_intent(
        NewIntent(
            IntentKind.SCALE_UP,
            "tok-1",
            T0,
            pool="aws-a100",
            offer=SPOT,
            nodes=2,
            decision_id="d-1",
            team="vision",
            price_usd_hr=Decimal("12.50"),
            payload=ScaleUpPayload(target=2, group="asg-1", gpus=8, gpu_model="A100", jobs=("7",)),
        )
    )
    expected = Intent(
        token="tok-1",
        kind=IntentKind.SCALE_UP,
        status=IntentStatus.PENDING,
        created_ts=T0,
        pool="aws-a100",
        offer="aws/us-east-1/p4d.24xlarge/spot",
        nodes=2,
        decision_id="d-1",
        team="vision",
        price_usd_hr=Decimal("12.50"),
        # The payload as its JSON: the job ids a list.
        payload={"target": 2, "group": "asg-1", "gpus": 8, "gpu_model": "A100", "jobs": ["7"]},
        completed_ts=None,
        error_code="",
        error="",
        result={},
        error_category=None,
    )
    assert got == expected
    assert log.intent("tok-1") == expected
    assert str(expected.price_usd_hr) == "12.50"  # the exact text kept
    assert got.scale_up_payload.jobs == ("7",)


def test_a_terminate_intent_keeps_its_instance_and_payload(log: IntentLog) -> None:
    log.record_intent(
        NewIntent(
            IntentKind.TERMINATE,
            "tok-t",
            T0,
            instance_id="i-1",
            payload=TerminatePayload(reason="idle", cloud="aws", region="us-east-1"),
        )
    )
    got = log.intent("tok-t")
    assert got is not None
    assert (got.kind, got.instance_id, got.offer, got.price_usd_hr) == (
        IntentKind.TERMINATE,
        "i-1",
        "",
        None,
    )
    assert got.terminate_payload == TerminatePayload(reason="idle", cloud="aws", region="us-east-1")


def test_recording_a_token_again_returns_the_first_unchanged(log: IntentLog) -> None:
    first = log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-1", T0, nodes=2, team="a"))
    again = log.record_intent(NewIntent(IntentKind.TERMINATE, "tok-1", T0 + 5, nodes=3, team="b"))
    assert again == first
    assert (again.kind, again.created_ts, again.nodes, again.team) == (
        IntentKind.SCALE_UP,
        T0,
        2,
        "a",
    )
    assert [i.token for i in log.intents()] == ["tok-1"]


def test_an_empty_token_is_refused(log: IntentLog) -> None:
    with pytest.raises(StoreError):
        log.record_intent(NewIntent(IntentKind.SCALE_UP, "", T0))
    assert log.intents() == []


def test_an_unknown_token(log: IntentLog) -> None:
    assert log.intent("tok-none") is None
    with pytest.raises(NotFound):
        log.confirm("tok-none", T0)
    with pytest.raises(NotFound):
        log.fail_intent("tok-none", T0, "capacity")
    assert log.intents() == []


def test_changing_an_intent_read_back_changes_nothing_stored(log: IntentLog) -> None:
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-1", T0, payload={"jobs": ["1"]}))
    got = log.intent("tok-1")
    assert got is not None
    got.payload["jobs"].append("2")
    got.payload["extra"] = 1  # type: ignore[index]
    again = log.intent("tok-1")
    assert again is not None and dict(again.payload) == {"jobs": ["1"]}


def test_confirm_stores_the_instances_and_steps_and_settles_the_intent(
    log: IntentLog, repo: InstanceRepo
) -> None:
    repo.add_instance(make_instance("i-old", S.READY, launched_ts=T0 - H))
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-1", T0, team="vision", nodes=2))
    got = log.confirm(
        "tok-1",
        T0 + 30,
        instances=[make_instance("i-2", launched_ts=T0 + 20), make_instance("i-1")],
        transitions=[("i-1", S.ALLOCATED, "cloud reports running")],
        result={"added": 2},
    )
    assert got.status is IntentStatus.CONFIRMED
    assert got.completed_ts == T0 + 30
    assert got.error_category is ErrorCategory.NONE
    # The result given, and the ids of the instances it created, sorted.
    assert dict(got.result) == {"added": 2, "instance_ids": ["i-1", "i-2"]}
    assert log.intent("tok-1") == got
    assert log.pending_intents() == []
    # The instances carry the intent's team and token; an added one does not.
    i1 = repo.instance("i-1")
    assert i1 is not None
    assert (i1.team, i1.intent_token, i1.instance.state) == ("vision", "tok-1", S.ALLOCATED)
    assert i1.instance.history == (
        recorded(S.REQUESTED),
        Transition(S.REQUESTED, S.ALLOCATED, T0 + 30, "cloud reports running"),
    )
    i2 = repo.instance("i-2")
    assert i2 is not None and (i2.team, i2.intent_token) == ("vision", "tok-1")
    assert i2.instance.history == (recorded(S.REQUESTED, T0 + 20),)
    old = repo.instance("i-old")
    assert old is not None and (old.team, old.intent_token) == ("", "")


def test_confirming_twice_stores_nothing_twice_and_keeps_the_first_time(
    log: IntentLog, repo: InstanceRepo
) -> None:
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-1", T0, team="vision"))
    first = log.confirm("tok-1", T0 + 30, instances=[make_instance("i-1")], result={"n": 1})
    again = log.confirm(
        "tok-1", T0 + 60, instances=[make_instance("i-1", S.READY)], result={"n": 2}
    )
    assert again == first
    assert again.completed_ts == T0 + 30
    assert dict(again.result) == {"n": 1, "instance_ids": ["i-1"]}
    (si,) = repo.instances()
    # The first stored instance is kept as it was.
    assert si.instance.state is S.REQUESTED
    assert si.instance.history == (recorded(S.REQUESTED),)


def test_a_terminate_intent_confirms_with_its_step(log: IntentLog, repo: InstanceRepo) -> None:
    repo.add_instance(make_instance("i-1", S.READY))
    log.record_intent(NewIntent(IntentKind.TERMINATE, "tok-t", T0 + 100, instance_id="i-1"))
    got = log.confirm("tok-t", T0 + 110, transitions=[("i-1", S.TERMINATING, "idle 600 s")])
    assert got.status is IntentStatus.CONFIRMED
    assert dict(got.result) == {}  # no instances created: no instance_ids
    si = repo.instance("i-1")
    assert si is not None and si.instance.state is S.TERMINATING
    assert si.instance.history[-1] == Transition(S.READY, S.TERMINATING, T0 + 110, "idle 600 s")


@pytest.mark.parametrize(
    ("step", "error"),
    [
        (("i-none", S.ALLOCATED, "no such instance"), NotFound),
        (("i-1", S.READY, "requested to ready skips allocation"), IllegalTransition),
    ],
)
def test_confirm_is_all_or_nothing(
    log: IntentLog,
    repo: InstanceRepo,
    step: tuple[str, InstanceState, str],
    error: type[Exception],
) -> None:
    repo.add_instance(make_instance("i-0", S.READY))
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-1", T0))
    with pytest.raises(error):
        log.confirm(
            "tok-1",
            T0 + 30,
            instances=[make_instance("i-1")],
            transitions=[("i-0", S.DRAINING, "idle"), step],
        )
    got = log.intent("tok-1")
    assert got is not None
    assert (got.status, got.completed_ts, dict(got.result)) == (IntentStatus.PENDING, None, {})
    assert repo.instance("i-1") is None
    i0 = repo.instance("i-0")
    assert i0 is not None and i0.instance.state is S.READY and len(i0.instance.history) == 1


def test_fail_changes_only_a_pending_intent(log: IntentLog) -> None:
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-a", T0))
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-b", T0))
    failed = log.fail_intent(
        "tok-a",
        T0 + 1,
        "capacity:InsufficientInstanceCapacity",
        "no p4d in us-east-1a",
        category=ErrorCategory.CAPACITY,
    )
    assert failed.status is IntentStatus.FAILED
    assert (failed.completed_ts, failed.error_code, failed.error) == (
        T0 + 1,
        "capacity:InsufficientInstanceCapacity",
        "no p4d in us-east-1a",
    )
    assert failed.error_category is ErrorCategory.CAPACITY
    assert log.intent("tok-a") == failed
    # Settled: failing again, with another reason, changes nothing.
    assert log.fail_intent("tok-a", T0 + 2, "other", category=ErrorCategory.AUTH) == failed
    # A confirmed intent is not failed afterwards.
    confirmed = log.confirm("tok-b", T0 + 3)
    assert log.fail_intent("tok-b", T0 + 4, "quota") == confirmed
    assert confirmed.status is IntentStatus.CONFIRMED and confirmed.error_code == ""


def test_fail_cuts_the_code_to_64_and_the_error_to_2000_characters(log: IntentLog) -> None:
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-a", T0))
    got = log.fail_intent("tok-a", T0 + 1, "c" * 64 + "dropped", "e" * 2000 + "dropped")
    assert got.error_code == "c" * 64
    assert got.error == "e" * 2000


def test_the_error_category_is_stored_with_the_outcome(log: IntentLog) -> None:
    for token in ("tok-a", "tok-b", "tok-c", "tok-d", "tok-p"):
        log.record_intent(NewIntent(IntentKind.SCALE_UP, token, T0))
    log.fail_intent("tok-a", T0 + 1, "capacity:odd", category=ErrorCategory.CAPACITY)
    log.fail_intent("tok-b", T0 + 1, "error:odd")  # no category given: none recorded
    log.confirm("tok-c", T0 + 1)  # met no error
    log.confirm("tok-d", T0 + 1, result={"added": 1}, category=ErrorCategory.QUOTA)
    got = {i.token: i.error_category for i in log.intents()}
    assert got == {
        "tok-a": ErrorCategory.CAPACITY,
        "tok-b": None,
        "tok-c": ErrorCategory.NONE,
        "tok-d": ErrorCategory.QUOTA,
        "tok-p": None,  # pending: not recorded yet
    }
    # The category is its own field: the code's prefix does not decide it.
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-x", T0))
    got_x = log.fail_intent("tok-x", T0 + 1, "throttling:odd", category=ErrorCategory.CAPACITY)
    assert got_x.error_category is ErrorCategory.CAPACITY


def test_a_late_shortfall_lowers_what_a_confirmed_scale_up_added_once(log: IntentLog) -> None:
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-late", T0, nodes=3))
    log.confirm("tok-late", T0 + 1, result={"added": 3, "target": 3, "group": "g"})
    got = log.late_shortfall(
        "tok-late",
        T0 + 40,
        missing=2,
        code="capacity:InsufficientInstanceCapacity",
        error="We currently do not have sufficient p5.48xlarge capacity",
        category=ErrorCategory.CAPACITY,
    )
    assert got.status is IntentStatus.CONFIRMED and got.completed_ts == T0 + 1
    assert got.result["added"] == 1 and got.result["target"] == 3
    assert got.result["shortfall_code"] == "capacity:InsufficientInstanceCapacity"
    assert got.result["late_failure_ts"] == T0 + 40
    assert got.error_category is ErrorCategory.CAPACITY
    assert got.error_code == "capacity:InsufficientInstanceCapacity"
    assert "sufficient" in got.error
    # once only: a second report of the same shortfall changes nothing
    again = log.late_shortfall(
        "tok-late", T0 + 80, missing=1, code="quota:x", category=ErrorCategory.QUOTA
    )
    assert again.result == got.result and again.error_category is ErrorCategory.CAPACITY
    # a pending or failed intent is returned as it is; an unknown token is NotFound
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-pend", T0))
    pend = log.late_shortfall(
        "tok-pend", T0 + 2, missing=1, code="c", category=ErrorCategory.CAPACITY
    )
    assert pend.status is IntentStatus.PENDING and pend.result == {}
    with pytest.raises(NotFound):
        log.late_shortfall("tok-none", T0, missing=1, code="c", category=ErrorCategory.CAPACITY)
    assert log.intent("tok-late") == got  # read back as returned


def test_pending_intents_oldest_first_by_kind(log: IntentLog) -> None:
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-c", T0 + 20))
    log.record_intent(NewIntent(IntentKind.TERMINATE, "tok-b", T0 + 10, instance_id="i-9"))
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-a", T0 + 30))
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-d", T0))
    log.confirm("tok-d", T0 + 40)
    assert [i.token for i in log.pending_intents()] == ["tok-b", "tok-c", "tok-a"]
    assert [i.token for i in log.pending_intents(IntentKind.SCALE_UP)] == ["tok-c", "tok-a"]
    assert [i.token for i in log.pending_intents("terminate")] == ["tok-b"]
    assert [i.token for i in log.pending_intents("")] == ["tok-b", "tok-c", "tok-a"]
    log.fail_intent("tok-b", T0 + 41, "not_found")
    assert [i.token for i in log.pending_intents()] == ["tok-c", "tok-a"]
    assert log.pending_intents("terminate") == []


def test_intents_oldest_first_ties_by_token_filtered(log: IntentLog) -> None:
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-b", T0))
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-a", T0))
    log.record_intent(NewIntent(IntentKind.TERMINATE, "tok-c", T0 + 10))
    log.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-d", T0 + 20))
    log.fail_intent("tok-a", T0 + 1, "capacity")
    log.confirm("tok-d", T0 + 21)

    def tokens(rows: list[Intent]) -> list[str]:
        return [i.token for i in rows]

    assert tokens(log.intents()) == ["tok-a", "tok-b", "tok-c", "tok-d"]
    assert tokens(log.intents(kind=IntentKind.SCALE_UP)) == ["tok-a", "tok-b", "tok-d"]
    assert tokens(log.intents(kind="terminate")) == ["tok-c"]
    assert tokens(log.intents(status=IntentStatus.PENDING)) == ["tok-b", "tok-c"]
    assert tokens(log.intents(status="failed")) == ["tok-a"]
    assert tokens(log.intents(kind="scale_up", status="confirmed")) == ["tok-d"]
    # since_ts is inclusive.
    assert tokens(log.intents(since_ts=T0 + 10)) == ["tok-c", "tok-d"]
    assert tokens(log.intents(since_ts=T0 + 10.5)) == ["tok-d"]
    assert tokens(log.intents(limit=2)) == ["tok-a", "tok-b"]
    assert tokens(log.intents(kind="scale_up", since_ts=T0, limit=2)) == ["tok-a", "tok-b"]
    assert tokens(log.intents(kind="", status="")) == ["tok-a", "tok-b", "tok-c", "tok-d"]


def test_failed_intent_counts_per_code_of_one_kind(log: IntentLog) -> None:
    for token in ("tok-1", "tok-2", "tok-3", "tok-4", "tok-5"):
        log.record_intent(NewIntent(IntentKind.SCALE_UP, token, T0))
    log.record_intent(NewIntent(IntentKind.TERMINATE, "tok-t", T0, instance_id="i-9"))
    log.fail_intent("tok-1", T0 + 1, "capacity:InsufficientInstanceCapacity")
    log.fail_intent("tok-2", T0 + 1, "capacity:InsufficientInstanceCapacity")
    log.fail_intent("tok-3", T0 + 1, "quota:VcpuLimitExceeded")
    log.fail_intent("tok-4", T0 + 1, "")  # no code
    log.confirm("tok-5", T0 + 1)  # not failed
    log.fail_intent("tok-t", T0 + 1, "not_found:InvalidInstanceID")
    assert log.failed_intent_counts() == {
        "capacity:InsufficientInstanceCapacity": 2,
        "quota:VcpuLimitExceeded": 1,
        "unknown": 1,
    }
    assert log.failed_intent_counts(IntentKind.TERMINATE) == {"not_found:InvalidInstanceID": 1}
    assert log.failed_intent_counts("no-such-kind") == {}


def test_no_intents_no_counts(log: IntentLog) -> None:
    assert log.pending_intents() == []
    assert log.intents() == []
    assert log.failed_intent_counts() == {}


# ----------------------------------------------------------------------------- InstanceRepo


def test_an_instance_reads_back_as_added(repo: InstanceRepo) -> None:
    inst = make_instance("i-1", S.ALLOCATED, node_name="cloud-1")
    got = repo.add_instance(inst, team="vision", intent_token="tok-1")
    expected = StoredInstance(
        instance=replace(inst, history=(recorded(S.ALLOCATED),)),
        team="vision",
        intent_token="tok-1",
        ended_ts=None,
        billed_until_ts=None,
        billed_seconds=0.0,
    )
    assert got == expected
    assert repo.instance("i-1") == expected
    assert str(got.instance.price_usd_hr) == "32.7726"
    assert repo.instance("i-none") is None


def test_adding_an_instance_again_keeps_the_first(repo: InstanceRepo) -> None:
    repo.add_instance(make_instance("i-1"), team="a")
    again = repo.add_instance(make_instance("i-1", S.READY, price="1"), team="b")
    assert again.team == "a"
    assert again.instance.state is S.REQUESTED
    assert again.instance.price_usd_hr == Decimal("32.7726")
    assert len(repo.instances()) == 1


def test_an_instance_added_with_its_history_and_ended(repo: InstanceRepo) -> None:
    history = (
        Transition(None, S.REQUESTED, T0, "launched"),
        Transition(S.REQUESTED, S.FAILED, T0 + 90, "capacity"),
    )
    inst = make_instance("i-1", S.FAILED, history=history, origin=InstanceOrigin.ORPHAN)
    got = repo.add_instance(inst)
    assert got.instance == inst
    assert got.instance.history == history  # kept as given, no "recorded" step
    assert got.instance.origin is InstanceOrigin.ORPHAN
    assert got.ended_ts == T0 + 90  # stored terminal: ended when it entered the state


def test_transitions_follow_the_table_and_keep_the_history_in_order(
    repo: InstanceRepo,
) -> None:
    repo.add_instance(make_instance("i-1"))
    moved = repo.transition("i-1", S.ALLOCATED, T0 + 40, "cloud reports running")
    assert moved.state is S.ALLOCATED and moved.entered_state_ts == T0 + 40
    repo.transition("i-1", S.JOINING, T0 + 60, "slurmd starting")
    repo.transition("i-1", S.READY, T0 + 200, "node idle in sinfo")
    # A move to the state it is in changes nothing.
    same = repo.transition("i-1", S.READY, T0 + 250, "still ready")
    assert same.state is S.READY and same.entered_state_ts == T0 + 200
    repo.transition("i-1", S.DRAINING, T0 + 5000, "idle 600 s")
    repo.transition("i-1", S.READY, T0 + 5050, "a job came")  # draining may go back
    repo.transition("i-1", S.TERMINATING, T0 + 5100, "drained")
    si = repo.instance("i-1")
    assert si is not None and si.ended_ts is None
    repo.transition("i-1", S.TERMINATED, T0 + 5200, "cloud reports terminated")
    si = repo.instance("i-1")
    assert si is not None
    assert [(t.from_state, t.to_state, t.at_ts, t.reason) for t in si.instance.history] == [
        (None, S.REQUESTED, T0, "recorded"),
        (S.REQUESTED, S.ALLOCATED, T0 + 40, "cloud reports running"),
        (S.ALLOCATED, S.JOINING, T0 + 60, "slurmd starting"),
        (S.JOINING, S.READY, T0 + 200, "node idle in sinfo"),
        (S.READY, S.DRAINING, T0 + 5000, "idle 600 s"),
        (S.DRAINING, S.READY, T0 + 5050, "a job came"),
        (S.READY, S.TERMINATING, T0 + 5100, "drained"),
        (S.TERMINATING, S.TERMINATED, T0 + 5200, "cloud reports terminated"),
    ]
    assert si.instance.state is S.TERMINATED
    assert si.instance.entered_state_ts == T0 + 5200
    assert si.ended_ts == T0 + 5200


@pytest.mark.parametrize(
    ("start", "to"),
    [(S.REQUESTED, S.READY), (S.TERMINATING, S.READY), (S.TERMINATED, S.FAILED)],
)
def test_an_illegal_move_is_refused_and_changes_nothing(
    repo: InstanceRepo, start: InstanceState, to: InstanceState
) -> None:
    repo.add_instance(make_instance("i-1", start))
    before = repo.instance("i-1")
    with pytest.raises(IllegalTransition):
        repo.transition("i-1", to, T0 + 10, "not in the table")
    assert repo.instance("i-1") == before


def test_a_failed_instance_ends_once(repo: InstanceRepo) -> None:
    repo.add_instance(make_instance("i-1", S.READY))
    repo.transition("i-1", S.FAILED, T0 + 100, "health check")
    repo.transition("i-1", S.TERMINATING, T0 + 200, "cleanup")  # failed may be terminated
    repo.transition("i-1", S.TERMINATED, T0 + 300, "gone")
    si = repo.instance("i-1")
    assert si is not None and si.instance.state is S.TERMINATED
    assert si.ended_ts == T0 + 100  # the first time it reached a terminal state


def test_an_unknown_instance(repo: InstanceRepo) -> None:
    with pytest.raises(NotFound):
        repo.transition("i-none", S.READY, T0, "?")
    with pytest.raises(NotFound):
        repo.set_node_name("i-none", "cloud-1")
    assert repo.instances() == []


def test_set_node_name(repo: InstanceRepo) -> None:
    repo.add_instance(make_instance("i-1"))
    repo.set_node_name("i-1", "cloud-aws-a100-1")
    si = repo.instance("i-1")
    assert si is not None and si.instance.node_name == "cloud-aws-a100-1"
    repo.set_node_name("i-1", "")
    si = repo.instance("i-1")
    assert si is not None and si.instance.node_name == ""
    assert len(si.instance.history) == 1  # naming is not a lifecycle step


def _ids(rows: list[StoredInstance]) -> list[str]:
    return [si.instance.instance_id for si in rows]


def test_instances_in_launch_order_then_id_filtered(repo: InstanceRepo) -> None:
    repo.add_instance(make_instance("i-d", S.READY, launched_ts=T0 + 30, pool="gcp-a100"))
    repo.add_instance(make_instance("i-c", S.TERMINATED, launched_ts=T0 + 20))
    repo.add_instance(make_instance("i-b", S.FAILED, launched_ts=T0 + 10, pool="gcp-a100"))
    repo.add_instance(make_instance("i-a", S.REQUESTED, launched_ts=T0 + 10))
    repo.add_instance(make_instance("i-e", S.DRAINING, launched_ts=T0))
    assert _ids(repo.instances()) == ["i-e", "i-a", "i-b", "i-c", "i-d"]
    assert _ids(repo.instances(states=[S.READY, S.DRAINING])) == ["i-e", "i-d"]
    assert _ids(repo.instances(states=["failed", "terminated"])) == ["i-b", "i-c"]
    assert _ids(repo.instances(states=[])) == []
    assert _ids(repo.instances(pool="gcp-a100")) == ["i-b", "i-d"]
    assert _ids(repo.instances(pool="")) == ["i-e", "i-a", "i-b", "i-c", "i-d"]  # any pool
    assert _ids(repo.instances(pool="none")) == []
    assert _ids(repo.instances(live_only=True)) == ["i-e", "i-a", "i-d"]
    assert _ids(repo.instances(live_only=True, pool="gcp-a100")) == ["i-d"]
    assert _ids(repo.instances(limit=2)) == ["i-e", "i-a"]
    assert _ids(repo.instances(limit=2, offset=2)) == ["i-b", "i-c"]
    assert _ids(repo.instances(offset=4)) == ["i-d"]
    assert _ids(repo.instances(live_only=True, limit=1, offset=1)) == ["i-a"]


def test_needs_billing_reads_the_watermarks_commit_billing_moves(impl: Impl) -> None:
    repo = impl.repo
    repo.add_instance(make_instance("i-live", S.READY))
    for iid in ("i-unbilled", "i-short", "i-done", "i-behind"):
        repo.add_instance(make_instance(iid, S.READY))
        repo.transition(iid, S.TERMINATED, T0 + 600, "gone")
    impl.ledger.commit_billing(
        [],
        instance_marks=[
            BillingMark("i-live", None, T0 + 600, 600.0),  # alive: still to bill
            BillingMark("i-short", None, T0 + 600, 30.0),  # under the 60 s minimum
            BillingMark("i-done", None, T0 + 600, 600.0),  # billed to its end
            BillingMark("i-behind", None, T0 + 300, 300.0),  # billed short of its end
        ],
    )
    done = repo.instance("i-done")
    assert done is not None
    assert (done.billed_until_ts, done.billed_seconds, done.ended_ts) == (
        T0 + 600,
        600.0,
        T0 + 600,
    )
    assert _ids(repo.instances(needs_billing=True)) == [
        "i-behind",
        "i-live",
        "i-short",
        "i-unbilled",
    ]


def test_timed_out_per_state(repo: InstanceRepo) -> None:
    repo.add_instance(make_instance("i-req"))  # requested at T0
    repo.add_instance(make_instance("i-ready", S.READY))
    repo.add_instance(make_instance("i-gone", S.TERMINATED))
    repo.add_instance(make_instance("i-join"))
    repo.transition("i-join", S.ALLOCATED, T0 + 100, "up")
    repo.transition("i-join", S.JOINING, T0 + 200, "joining")
    # Default: requested, allocated and joining time out after 600 s in the state (strictly
    # more); ready and terminated never. In launch order (all at T0), then by id.
    assert repo.timed_out(T0 + 600) == []
    (req,) = repo.timed_out(T0 + 700)
    assert req.instance_id == "i-req" and req.state is S.REQUESTED
    assert [i.instance_id for i in repo.timed_out(T0 + 801)] == ["i-join", "i-req"]
    assert [i.instance_id for i in repo.timed_out(T0 + 10 * DAY_S)] == ["i-join", "i-req"]
    # Given timeouts replace the defaults.
    assert [i.instance_id for i in repo.timed_out(T0 + 61, {S.REQUESTED: 60.0})] == ["i-req"]
    assert [i.instance_id for i in repo.timed_out(T0 + 61, {S.READY: 60.0})] == ["i-ready"]
    assert repo.timed_out(T0 + 250, {S.JOINING: 60.0}) == []  # joining since T0 + 200


def test_counts_and_dollars_per_hour(repo: InstanceRepo) -> None:
    assert repo.instance_counts() == {}
    assert repo.cloud_usd_per_hour() == Decimal(0)
    repo.add_instance(make_instance("i-1", S.READY, price="32.7726"))
    repo.add_instance(make_instance("i-2", S.REQUESTED, price="12.5", offer=ON_DEMAND))
    repo.add_instance(make_instance("i-3", S.READY, price="0.0001"))
    repo.add_instance(make_instance("i-4", S.TERMINATED, price="100"))
    repo.add_instance(make_instance("i-5", S.FAILED, price="1000"))
    assert repo.instance_counts() == {"ready": 2, "requested": 1, "terminated": 1, "failed": 1}
    # Requested (in flight) and ready count; terminated and failed do not:
    # 32.7726 + 12.5 + 0.0001 = 45.2727.
    assert repo.cloud_usd_per_hour() == Decimal("45.2727")
    repo.transition("i-1", S.TERMINATING, T0 + 10, "idle")
    assert repo.cloud_usd_per_hour() == Decimal("45.2727")  # still billed while terminating
    repo.transition("i-1", S.TERMINATED, T0 + 20, "gone")
    assert repo.cloud_usd_per_hour() == Decimal("12.5001")
    assert repo.instance_counts() == {"ready": 1, "requested": 1, "terminated": 2, "failed": 1}
