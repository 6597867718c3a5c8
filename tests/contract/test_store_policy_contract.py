"""The `PolicyRepo` contract (`provisioner.ports.store.PolicyRepo`): the burst pools as policy
declares them with the operator's drain flag kept across syncs, the operator's switches (their
defaults, the pause, the sweep's hold keeping its start time and the go-ahead) and the budgets
replaced whole by each sync. On the in-memory class (`MemoryPolicyRepo`), SQLite and PostgreSQL
alike (see test_store_contract.py for how the engines are chosen). Every expected value is
written out by hand.

Where the two differ: the SQL store promises no order of `OperatorState.drained_pools` (memory
gives them by name), so the tests compare them as sets."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from test_store_contract import IMPLEMENTATIONS, T0, failing_after

from provisioner.config.models import Budgets, PoolPolicy, TeamBudget
from provisioner.domain.records import BudgetRecord, OperatorState, PoolInfo
from provisioner.ports.store import PolicyRepo, StoreError
from provisioner.store import Store
from provisioner.store.memory import MemoryPolicyRepo


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def policy(db_backend: str, request: pytest.FixtureRequest) -> Iterator[PolicyRepo]:
    if db_backend == "memory":
        yield MemoryPolicyRepo()
        return
    store = Store(request.getfixturevalue("db_url"))
    try:
        yield store
    finally:
        store.close()


def aws(**kw: Any) -> PoolPolicy:
    fields: dict[str, Any] = {
        "name": "aws-a100",
        "cloud": "aws",
        "regions": ["us-east-1", "us-west-2"],
        "gpu_model": "A100",
        "capacity": "spot",
        "max_nodes": 8,
        "partition": "gpu",
        "team": "vision",
    }
    fields.update(kw)
    return PoolPolicy(**fields)


def gcp() -> PoolPolicy:
    # No gpu_model: picked by instance type; kept as "".
    return PoolPolicy(
        name="gcp-h100", cloud="gcp", regions=["us-central1"], instance_types=["a3-highgpu-8g"]
    )


AWS = PoolInfo(
    name="aws-a100",
    cloud="aws",
    regions=("us-east-1", "us-west-2"),
    partition="gpu",
    team="vision",
    gpu_model="A100",
    capacity="spot",
    max_nodes=8,
)
GCP = PoolInfo(
    name="gcp-h100",
    cloud="gcp",
    regions=("us-central1",),
    partition="cloud",
    team="",
    gpu_model="",
    capacity="any",
    max_nodes=4,
)


# ----------------------------------------------------------------------------- pools


def test_pools_read_back_by_name_as_declared(policy: PolicyRepo) -> None:
    assert policy.pools() == []
    policy.sync_pools([gcp(), aws()], T0)
    assert policy.pools() == [AWS, GCP]
    assert policy.pool("aws-a100") == AWS
    assert policy.pool("gcp-h100") == GCP
    assert policy.pool("azure-x") is None


def test_sync_pools_keeps_the_drain_flag_and_takes_the_rest_from_policy(
    policy: PolicyRepo,
) -> None:
    policy.sync_pools([aws(), gcp()], T0)
    policy.set_pool_drained("aws-a100", True, T0 + 10, by="ops")
    policy.sync_pools([aws(max_nodes=2, regions=["eu-west-1"], team="nlp")], T0 + 20)
    drained = PoolInfo(
        name="aws-a100",
        cloud="aws",
        regions=("eu-west-1",),
        partition="gpu",
        team="nlp",
        gpu_model="A100",
        capacity="spot",
        max_nodes=2,
        drained=True,
        drained_ts=T0 + 10,
        drained_by="ops",
    )
    # gcp-h100 is no longer declared: it is kept as it was.
    assert policy.pools() == [drained, GCP]
    assert policy.operator_state().drained_pools == ("aws-a100",)


def test_a_sync_that_breaks_half_way_stores_no_pool(policy: PolicyRepo) -> None:
    policy.sync_pools([gcp()], T0)
    with pytest.raises(RuntimeError):
        policy.sync_pools(failing_after([aws(), aws(name="aws-h100")], RuntimeError()), T0 + 1)
    assert policy.pools() == [GCP]


def test_draining_and_undraining_a_pool(policy: PolicyRepo) -> None:
    policy.sync_pools([aws(), gcp()], T0)
    got = policy.set_pool_drained("gcp-h100", True, T0 + 5, by="ann")
    expected = PoolInfo(
        name="gcp-h100",
        cloud="gcp",
        regions=("us-central1",),
        partition="cloud",
        gpu_model="",
        max_nodes=4,
        drained=True,
        drained_ts=T0 + 5,
        drained_by="ann",
    )
    assert got == expected
    assert policy.pool("gcp-h100") == expected
    policy.set_pool_drained("aws-a100", True, T0 + 6)
    assert set(policy.operator_state().drained_pools) == {"aws-a100", "gcp-h100"}
    # Undraining clears the time and the author.
    assert policy.set_pool_drained("gcp-h100", False, T0 + 7, by="bob") == GCP
    assert policy.operator_state().drained_pools == ("aws-a100",)


def test_draining_an_unknown_pool_is_none_and_stores_nothing(policy: PolicyRepo) -> None:
    assert policy.set_pool_drained("azure-x", True, T0, by="ann") is None
    assert policy.pool("azure-x") is None
    assert policy.pools() == []
    assert policy.operator_state().drained_pools == ()


# ----------------------------------------------------------------------------- operator


def test_operator_state_defaults(policy: PolicyRepo) -> None:
    default = OperatorState(
        paused=False,
        reason="",
        updated_ts=0.0,
        updated_by="",
        drained_pools=(),
        sweep_hold_reason="",
        sweep_hold_ts=None,
        sweep_approved_ts=None,
        sweep_approved_by="",
    )
    assert policy.operator_state() == default
    policy.sync_pools([aws()], T0)  # pools alone change no switch
    assert policy.operator_state() == default
    assert not policy.operator_state().sweep_approved


def test_the_first_controller_identity_claimed_is_kept(policy: PolicyRepo) -> None:
    assert policy.claim_controller_id("burst-3f9a2c1d") == "burst-3f9a2c1d"
    # a second claim (the other controller of an HA pair, or a restart) gets the first
    assert policy.claim_controller_id("burst-77e0b6aa") == "burst-3f9a2c1d"
    # the identity is its own field: the operator's switches neither hide nor change it
    policy.set_paused(True, T0, by="ops", reason="maintenance")
    assert policy.claim_controller_id("burst-0000") == "burst-3f9a2c1d"
    assert policy.operator_state().paused
    with pytest.raises(StoreError):
        policy.claim_controller_id("")


def test_pause_and_resume(policy: PolicyRepo) -> None:
    policy.set_paused(True, T0, by="ann", reason="maintenance")
    assert policy.operator_state() == OperatorState(True, "maintenance", T0, "ann")
    policy.set_paused(False, T0 + 60, by="bob")
    assert policy.operator_state() == OperatorState(False, "", T0 + 60, "bob")


def test_a_pause_reason_is_kept_to_500_characters(policy: PolicyRepo) -> None:
    policy.set_paused(True, T0, by="ann", reason="x" * 499 + "yz")
    assert policy.operator_state().reason == "x" * 499 + "y"


def test_the_sweep_hold_keeps_its_start_time_while_it_lasts(policy: PolicyRepo) -> None:
    policy.set_sweep_hold("clouds disagree", T0)
    state = policy.operator_state()
    assert (state.sweep_hold_reason, state.sweep_hold_ts) == ("clouds disagree", T0)
    assert not state.sweep_approved
    policy.approve_sweep(T0 + 5, by="ann")
    state = policy.operator_state()
    assert (state.sweep_approved_ts, state.sweep_approved_by) == (T0 + 5, "ann")
    assert state.sweep_approved
    # Still holding, for another reason: the start time stays, so the go-ahead stays valid.
    policy.set_sweep_hold("still disagree", T0 + 10)
    state = policy.operator_state()
    assert (state.sweep_hold_reason, state.sweep_hold_ts) == ("still disagree", T0)
    assert state.sweep_approved
    # Released: no start time; the go-ahead is kept but counts for no hold.
    policy.set_sweep_hold("", T0 + 20)
    state = policy.operator_state()
    assert (state.sweep_hold_reason, state.sweep_hold_ts) == ("", None)
    assert (state.sweep_approved_ts, state.sweep_approved_by) == (T0 + 5, "ann")
    assert not state.sweep_approved
    # A new hold starts anew: the old go-ahead came before it.
    policy.set_sweep_hold("again", T0 + 30)
    state = policy.operator_state()
    assert (state.sweep_hold_reason, state.sweep_hold_ts) == ("again", T0 + 30)
    assert not state.sweep_approved
    # The sweep's switches leave the pause alone.
    assert (state.paused, state.reason, state.updated_ts, state.updated_by) == (False, "", 0.0, "")


def test_a_sweep_hold_reason_is_kept_to_500_characters(policy: PolicyRepo) -> None:
    policy.set_sweep_hold("r" * 600, T0)
    assert policy.operator_state().sweep_hold_reason == "r" * 500


def test_a_go_ahead_before_any_hold_counts_for_none(policy: PolicyRepo) -> None:
    policy.approve_sweep(T0, by="ann")
    state = policy.operator_state()
    assert (state.sweep_approved_ts, state.sweep_approved_by) == (T0, "ann")
    assert (state.sweep_hold_reason, state.sweep_hold_ts) == ("", None)
    assert not state.sweep_approved
    # A go-ahead at the very second the hold starts counts (at or after its start).
    policy.set_sweep_hold("disagree", T0 + 10)
    policy.approve_sweep(T0 + 10, by="bob")
    assert policy.operator_state().sweep_approved


# ----------------------------------------------------------------------------- budgets


def test_budgets_read_back_by_scope_then_name_exactly(policy: PolicyRepo) -> None:
    assert policy.budgets() == []
    policy.sync_budgets(
        Budgets(
            global_usd_per_hour=Decimal("250.50"),
            teams={
                "vision": TeamBudget(monthly_usd=Decimal("10000")),
                "nlp": TeamBudget(monthly_usd=Decimal("5000.25")),
            },
        ),
        T0,
    )
    got = policy.budgets()
    assert got == [
        BudgetRecord("global", "*", None, Decimal("250.50")),
        BudgetRecord("team", "nlp", Decimal("5000.25"), None),
        BudgetRecord("team", "vision", Decimal("10000"), None),
    ]
    # The amounts keep their exact text.
    assert [str(b.usd_per_hour or b.monthly_usd) for b in got] == ["250.50", "5000.25", "10000"]


def test_budgets_are_replaced_by_a_new_sync(policy: PolicyRepo) -> None:
    policy.sync_budgets(
        Budgets(
            global_usd_per_hour=Decimal("100"),
            teams={
                "vision": TeamBudget(monthly_usd=Decimal("10000")),
                "nlp": TeamBudget(monthly_usd=Decimal("5000")),
            },
        ),
        T0,
    )
    # No global budget any more, vision gone, nlp changed, audio new.
    policy.sync_budgets(
        Budgets(
            teams={
                "nlp": TeamBudget(monthly_usd=Decimal("6000")),
                "audio": TeamBudget(monthly_usd=Decimal("0")),
            }
        ),
        T0 + 60,
    )
    assert policy.budgets() == [
        BudgetRecord("team", "audio", Decimal("0"), None),
        BudgetRecord("team", "nlp", Decimal("6000"), None),
    ]
    policy.sync_budgets(Budgets(), T0 + 120)
    assert policy.budgets() == []
