"""Lifecycle history, per-state timeouts, decisions, pools, operator state, usage, telemetry."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
from store_helpers import T0, make_instance

from provisioner.config.models import Budgets, PoolPolicy, TeamBudget
from provisioner.domain.instances import IllegalTransition, InstanceState
from provisioner.domain.nodes import GpuSample
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import Alternative, Decision, ReasonCode, Rejection
from provisioner.domain.records import JobUsage, LedgerEntry, LedgerKind, TokenRecord
from provisioner.store import NotFound

S = InstanceState


def test_history_keeps_every_step_with_its_reason(store):
    store.add_instance(make_instance("i-1"))
    store.transition("i-1", S.ALLOCATED, T0 + 40, "cloud reports running")
    store.transition("i-1", S.JOINING, T0 + 60, "slurmd starting")
    store.transition("i-1", S.READY, T0 + 200, "node idle in sinfo")
    store.transition("i-1", S.DRAINING, T0 + 5000, "idle 600 s, NVML idle")
    store.transition("i-1", S.TERMINATING, T0 + 5100, "drained")
    store.transition("i-1", S.TERMINATED, T0 + 5200, "cloud reports terminated")
    si = store.instance("i-1")
    assert si is not None
    steps = [(t.from_state, t.to_state, t.at_ts, t.reason) for t in si.instance.history]
    assert steps == [
        (None, S.REQUESTED, T0, "recorded"),
        (S.REQUESTED, S.ALLOCATED, T0 + 40, "cloud reports running"),
        (S.ALLOCATED, S.JOINING, T0 + 60, "slurmd starting"),
        (S.JOINING, S.READY, T0 + 200, "node idle in sinfo"),
        (S.READY, S.DRAINING, T0 + 5000, "idle 600 s, NVML idle"),
        (S.DRAINING, S.TERMINATING, T0 + 5100, "drained"),
        (S.TERMINATING, S.TERMINATED, T0 + 5200, "cloud reports terminated"),
    ]
    assert si.ended_ts == T0 + 5200
    assert si.instance.entered_state_ts == T0 + 5200


def test_illegal_transition_is_refused_and_writes_nothing(store):
    store.add_instance(make_instance("i-1"))
    with pytest.raises(IllegalTransition):
        store.transition("i-1", S.READY, T0 + 10, "skipping allocation")
    si = store.instance("i-1")
    assert si is not None and si.instance.state is S.REQUESTED
    assert len(si.instance.history) == 1


def test_same_state_transition_is_a_no_op(store):
    store.add_instance(make_instance("i-1", state=S.READY))
    store.transition("i-1", S.READY, T0 + 10, "still ready")
    si = store.instance("i-1")
    assert si is not None and len(si.instance.history) == 1


def test_transition_of_unknown_instance(store):
    with pytest.raises(NotFound):
        store.transition("i-x", S.READY, T0, "?")


def test_per_state_timeouts_come_from_the_domain(store):
    store.add_instance(make_instance("i-req"))  # requested at T0
    store.add_instance(make_instance("i-ready", state=S.READY))
    store.add_instance(make_instance("i-join"))
    store.transition("i-join", S.ALLOCATED, T0 + 100, "up")
    store.transition("i-join", S.JOINING, T0 + 200, "joining")
    # Default: requested, allocated, joining time out after 600 s in the state; ready never.
    assert store.timed_out(T0 + 500) == []
    assert [i.instance_id for i in store.timed_out(T0 + 700)] == ["i-req"]
    assert sorted(i.instance_id for i in store.timed_out(T0 + 801)) == ["i-join", "i-req"]
    custom = {S.REQUESTED: 60.0}
    assert [i.instance_id for i in store.timed_out(T0 + 61, custom)] == ["i-req"]


def test_decisions_round_trip_with_alternatives_and_iac_review(store):
    chosen = OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT)
    other = OfferKey("gcp", "us-central1", "a2-highgpu-8g", CapacityType.ON_DEMAND)
    d = Decision(
        decision_id="d-abc",
        reason=ReasonCode.BURST_WAIT_EXCEEDS_BUDGET,
        job_ids=("1", "2"),
        chosen=chosen,
        alternatives=(
            Alternative(chosen, Decimal("12.5"), Decimal("25.0"), chosen=True),
            Alternative(
                other, Decimal("29.4"), Decimal("58.8"), rejected_because=Rejection.COSTLIER
            ),
        ),
        predicted_wait_s=7200.0,
        wait_budget_s=1800.0,
        wait_saved_s=5400.0,
        global_headroom_usd_hr=Decimal("87.5"),
        team_headroom_usd=Decimal("1000"),
        team="vision",
        detail={"note": "x"},
    )
    store.record_decisions([d], T0)
    store.record_decisions([d], T0 + 1)  # the same id again: one row
    assert store.set_iac_review("d-abc", {"create": 1, "resources": ["asg"]})
    assert not store.set_iac_review("d-none", "text")
    got = store.decision("d-abc")
    assert got is not None
    assert got.decision == d
    assert got.created_ts == T0
    assert got.iac_review_format == "json" and '"create": 1' in (got.iac_review or "")
    assert store.decision_counts() == {"burst_wait_exceeds_budget": 1}
    assert [x.decision.decision_id for x in store.decisions(reason="burst_urgent")] == []


def test_pools_sync_keeps_the_operators_drain(store):
    pool = PoolPolicy(name="aws-a100", cloud="aws", regions=["us-east-1"], gpu_model="A100")
    store.sync_pools([pool], T0)
    assert store.set_pool_drained("aws-a100", True, T0 + 1, by="ops (abc)") is not None
    assert store.set_pool_drained("nope", True, T0 + 1) is None
    store.sync_pools([pool.model_copy(update={"max_nodes": 9})], T0 + 2)
    p = store.pool("aws-a100")
    assert p is not None and p.drained and p.max_nodes == 9 and p.drained_by == "ops (abc)"
    assert store.operator_state().drained_pools == ("aws-a100",)


def test_pause_flag(store):
    assert store.operator_state().paused is False
    store.set_paused(True, T0, by="alice", reason="quota review")
    st = store.operator_state()
    assert st.paused and st.reason == "quota review" and st.updated_by == "alice"
    store.set_paused(False, T0 + 1)
    assert store.operator_state().paused is False


def test_job_usage_upsert_and_end(store):
    u = JobUsage("42", "cloud-1", 4, T0, instance_id="i-1", account="a", team="t")
    store.record_job_usage([u])
    store.record_job_usage([u])  # again: no duplicate
    assert len(store.job_usage(instance_id="i-1")) == 1
    assert store.end_job("42", T0 + 100) == 1
    got = store.job_usage(instance_id="i-1")[0]
    assert got.end_ts == T0 + 100
    assert store.job_usage(overlapping=(T0 + 100, T0 + 200)) == []
    assert len(store.job_usage(overlapping=(T0 + 50, T0 + 200))) == 1


def test_job_usage_keeps_the_parts_of_gpus_a_job_holds(store):
    # a one-slice MIG device: 1/7 of a GPU, beside no whole GPU (issue 32)
    u = JobUsage("43", "gpu-01", 0, T0, part_gpus=1 / 7)
    store.record_job_usage([u])
    (got,) = store.job_usage(node_name="gpu-01")
    assert got.gpus == 0 and got.part_gpus == 1 / 7
    store.record_job_usage([replace(u, part_gpus=3 / 7)])  # an update keeps the newest
    assert store.job_usage(node_name="gpu-01")[0].part_gpus == 3 / 7


def test_job_usage_and_the_ledger_keep_which_part_of_a_gpu_a_job_held(store):
    store.record_job_usage([JobUsage("44", "gpu-02", 0, T0, part_gpus=1 / 7, gpu_part="1g.10gb")])
    store.record_job_usage([JobUsage("45", "gpu-02", 2, T0)])  # whole GPUs: no part
    assert {u.job_id: u.gpu_part for u in store.job_usage(node_name="gpu-02")} == {
        "44": "1g.10gb",
        "45": "",
    }
    entry = LedgerEntry(
        T0, T0 + 60, LedgerKind.JOB, Decimal("0.5"), job_id="44", gpu_part="1g.10gb"
    )
    store.add_ledger([entry])
    (row,) = store.ledger_entries(job_id="44")
    assert row.gpu_part == "1g.10gb"


def test_budgets_sync_replaces(store):
    store.sync_budgets(
        Budgets(global_usd_per_hour=Decimal("100"), teams={"t": TeamBudget(monthly_usd=5000)}),
        T0,
    )
    got = {(b.scope, b.name): b for b in store.budgets()}
    assert got[("global", "*")].usd_per_hour == Decimal("100")
    assert got[("team", "t")].monthly_usd == Decimal("5000")
    store.sync_budgets(Budgets(), T0)
    assert store.budgets() == []


def test_tokens_are_stored_as_given_and_revocable(store):
    store.add_token(TokenRecord("abc", "ci", "viewer", "salt", "hash", T0))
    assert store.token("abc") is not None
    assert store.revoke_token("abc", T0 + 1)
    assert store.token("abc").revoked_ts == T0 + 1  # type: ignore[union-attr]
    assert not store.revoke_token("zzz", T0)


def test_telemetry_keeps_the_latest_sample(store):
    g0 = GpuSample(0, "GPU-0", 90.0, sampled_ts=T0 + 10)
    old = GpuSample(0, "GPU-0", 10.0, sampled_ts=T0)
    store.upsert_telemetry("n1", [g0, GpuSample(1, "GPU-1", 0.0, sampled_ts=T0 + 10)], T0 + 11)
    assert store.upsert_telemetry("n1", [old], T0 + 12) == 0
    (node,) = store.telemetry()
    assert node.node == "n1" and [g.util_pct for g in node.gpus] == [90.0, 0.0]
