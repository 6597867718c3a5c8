"""Planner decisions on small snapshots whose right answer is worked out by hand."""

from __future__ import annotations

import copy
from dataclasses import replace
from decimal import Decimal

from provisioner.domain.instances import InstanceOrigin, InstanceState, Transition
from provisioner.domain.jobs import Job
from provisioner.domain.nodes import GpuSample, Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import Drain, ReasonCode, ScaleUp, Terminate
from provisioner.domain.snapshot import ClusterSnapshot, SpendState
from provisioner.plan.backoff import Backoff
from provisioner.plan.planner import plan
from tests.unit.helpers import (
    T0,
    catalog,
    offer,
    onprem_nodes,
    p4d_instance,
    pending,
    policy,
    running,
)

FULL = onprem_nodes(2, 4, alloc=4)
BUSY = (running("r1", 4, "onprem-1", ends_in=3600), running("r2", 4, "onprem-2", ends_in=7200))


def snap(*jobs, nodes=FULL, **kw) -> ClusterSnapshot:
    return ClusterSnapshot(taken_ts=T0, jobs=(*BUSY, *jobs), nodes=nodes, **kw)


def reasons(p) -> dict[str, ReasonCode]:
    return {j: d.reason for d in p.decisions for j in d.job_ids}


def test_job_within_budget_waits_and_one_beyond_bursts() -> None:
    # budget = 0.5 * gpus * runtime; on-prem frees at +3600 s
    short_wait = pending("a", 1, runtime=8000)  # budget 4000 >= 3600: waits
    long_wait = pending("b", 1, runtime=1000)  # budget 500 < 3600: bursts
    p = plan(snap(short_wait, long_wait), policy(), catalog(), Backoff(), T0)
    r = reasons(p)
    assert r["a"] is ReasonCode.WAIT_WITHIN_BUDGET
    assert r["b"] is ReasonCode.BURST_WAIT_EXCEEDS_BUDGET
    assert p.predicted_start_ts["a"] == T0 + 3600
    (up,) = p.scale_ups
    assert up.job_ids == ("b",) and up.nodes == 1


def test_cheapest_expected_cost_wins_and_alternatives_are_listed() -> None:
    p = plan(snap(pending("b", 1, runtime=1000)), policy(), catalog(), Backoff(), T0)
    (up,) = p.scale_ups
    # a 1-GPU spot node at $1/h beats a whole 8-GPU node
    assert up.offer == OfferKey("aws", "us-east-1", "a2-1g", CapacityType.SPOT)
    alts = up.decision.alternatives
    assert alts[0].chosen and alts[0].usd_per_hour == Decimal("1")
    assert [a.usd_per_hour for a in alts] == sorted(a.usd_per_hour for a in alts)
    assert len(alts) > 1


def test_short_wait_is_not_worth_a_boot() -> None:
    nodes = onprem_nodes(1, 4, alloc=4)
    jobs = (running("r1", 4, "onprem-1", ends_in=120),)
    s = ClusterSnapshot(taken_ts=T0, jobs=(*jobs, pending("b", 1, 10)), nodes=nodes)
    p = plan(s, policy(), catalog(), Backoff(), T0)
    assert reasons(p)["b"] is ReasonCode.WAIT_FASTER_THAN_BOOT
    assert not p.scale_ups


def test_urgent_partition_bursts_at_once_on_demand() -> None:
    job = pending("inf", 1, runtime=100000, partition="inference")
    pol = policy(
        pools=[
            {
                "name": "aws-a100",
                "cloud": "aws",
                "regions": ["us-east-1"],
                "gpu_model": "A100",
                "partition": "inference",
                "max_nodes": 5,
            }
        ]
    )
    p = plan(snap(job), pol, catalog(), Backoff(), T0)
    (up,) = p.scale_ups
    assert up.decision.reason is ReasonCode.BURST_URGENT
    assert up.offer.capacity is CapacityType.ON_DEMAND


def test_jobs_pack_onto_one_node_when_only_big_nodes_exist() -> None:
    cat = catalog(offer(itype="p4d", gpus=8, od="32", spot=None))
    jobs = [pending(f"j{i}", 2, runtime=100) for i in range(5)]  # 10 GPUs: 2 nodes of 8
    p = plan(snap(*jobs), policy(), cat, Backoff(), T0)
    ups = p.scale_ups
    assert sum(u.nodes for u in ups) == 2
    assert sorted(len(u.job_ids) for u in ups) == [1, 4]


def test_capacity_in_flight_is_used_before_buying_more() -> None:
    inst = p4d_instance("i-1", InstanceState.REQUESTED, launched_ago=60)
    p = plan(
        snap(pending("b", 2, runtime=100), instances=(inst,)), policy(), catalog(), Backoff(), T0
    )
    assert not p.scale_ups
    assert reasons(p)["b"] is ReasonCode.COVERED_BY_INFLIGHT


def test_backoff_moves_to_the_next_offer() -> None:
    cheap = OfferKey("aws", "us-east-1", "a2-1g", CapacityType.SPOT)
    bo = Backoff().record_failure(cheap, T0, 300, 3600, "InsufficientInstanceCapacity")
    p = plan(snap(pending("b", 1, runtime=1000)), policy(), catalog(), bo, T0)
    (up,) = p.scale_ups
    assert up.offer != cheap
    rejected = [a for a in up.decision.alternatives if a.rejected_because == "backoff"]
    assert rejected and rejected[0].offer == cheap


def test_pool_max_and_global_budget_block() -> None:
    pol = policy(
        pools=[
            {
                "name": "aws-a100",
                "cloud": "aws",
                "regions": ["us-east-1"],
                "gpu_model": "A100",
                "max_nodes": 0,
            }
        ]
    )
    p = plan(snap(pending("b", 1, runtime=1000)), pol, catalog(), Backoff(), T0)
    assert reasons(p)["b"] is ReasonCode.BLOCKED_POOL_MAX and not p.scale_ups
    pol = policy(budgets={"global_usd_per_hour": "5"})
    s = snap(pending("b", 1, runtime=1000), spend=SpendState(burn_usd_hr=Decimal("4.5")))
    p = plan(s, pol, catalog(), Backoff(), T0)
    assert reasons(p)["b"] is ReasonCode.BLOCKED_GLOBAL_BUDGET and not p.scale_ups


def test_team_monthly_budget_counts_spent_and_committed() -> None:
    pol = policy(
        budgets={
            "teams": {"research": {"monthly_usd": "100"}},
            "team_of_account": {"ml": "research"},
        }
    )
    spend = SpendState(
        team_month_spent_usd={"research": Decimal("90")},
        team_committed_usd={"research": Decimal("9.9")},
    )
    # 1 GPU spot at $1/h for 1000 s + 300 s boot is about $0.36: over the $0.10 left
    p = plan(
        snap(pending("b", 1, runtime=1000, account="ml"), spend=spend),
        pol,
        catalog(),
        Backoff(),
        T0,
    )
    assert reasons(p)["b"] is ReasonCode.BLOCKED_TEAM_BUDGET


def burst_node(name: str, idle_for: float, util: float | None, state=NodeState.IDLE) -> Node:
    load = () if util is None else (GpuSample(0, "GPU-0", util),)
    return Node(
        name=name,
        kind=NodeKind.BURST,
        gpus=8,
        gpu_type="a100",
        state=state,
        pool="aws-a100",
        instance_id=f"i-{name}",
        idle_since_ts=T0 - idle_for,
        gpu_load=load,
    )


def test_scale_down_needs_slurm_and_nvml_idle() -> None:
    nodes = (
        *FULL,
        burst_node("b1", 900, 0.0),
        burst_node("b2", 900, 80.0),
        burst_node("b3", 100, 0.0),
        burst_node("b4", 0, None, NodeState.DRAINED),
    )
    p = plan(snap(nodes=nodes), policy(), catalog(), Backoff(), T0)
    assert [a.node for a in p.actions if isinstance(a, Drain)] == ["b1"]
    assert [a.node for a in p.actions if isinstance(a, Terminate)] == ["b4"]
    kept = [d for d in p.decisions if d.reason is ReasonCode.KEEP_GPU_BUSY]
    assert [d.node for d in kept] == ["b2"]


def test_no_nvml_sample_blocks_scale_down_when_required() -> None:
    pol = policy(guardrails={"idle_timeout_s": 600, "require_nvml_idle": True})
    p = plan(snap(nodes=(*FULL, burst_node("b1", 900, None))), pol, catalog(), Backoff(), T0)
    assert not p.actions


def test_idle_burst_node_is_used_not_drained() -> None:
    nodes = (*FULL, burst_node("b1", 900, 0.0))
    p = plan(snap(pending("b", 1, runtime=100), nodes=nodes), policy(), catalog(), Backoff(), T0)
    assert reasons(p)["b"] is ReasonCode.COVERED_BY_INFLIGHT
    # Nothing bought, drained or ended: the one action moves the job onto the idle node's pool.
    assert [(type(a).__name__, a.pool, a.job_ids) for a in p.actions] == [
        ("MoveJobs", "aws-a100", ("b",))
    ]


def test_stale_snapshot_plans_nothing() -> None:
    s = snap(pending("b", 1, runtime=100), nodes=(*FULL, burst_node("b1", 9000, 0.0)))
    s = s.mark_stale("squeue timed out")
    p = plan(s, policy(), catalog(), Backoff(), T0)
    assert not p.actions
    assert [d.reason for d in p.decisions] == [ReasonCode.BLOCKED_STALE_SNAPSHOT]


def test_paused_blocks_bursts_but_not_scale_down() -> None:
    s = replace(
        snap(pending("b", 1, runtime=100), nodes=(*FULL, burst_node("b1", 900, 0.0))), paused=True
    )
    p = plan(s, policy(), catalog(), Backoff(), T0)
    assert not p.scale_ups
    assert reasons(p)["b"] is ReasonCode.BLOCKED_PAUSED


def test_instance_that_never_joins_is_terminated() -> None:
    inst = p4d_instance("i-9", InstanceState.JOINING, launched_ago=3600)
    p = plan(snap(instances=(inst,)), policy(), catalog(), Backoff(), T0)
    (t,) = p.terminations
    assert t.instance_id == "i-9" and t.decision.reason is ReasonCode.JOIN_TIMEOUT


def test_an_orphan_is_not_timed_out_from_a_launch_it_was_not_made_for() -> None:
    # Rebuilt from tags after an older store copy came back, an hour after its launch: unbound,
    # it may be the machine under a node running jobs (sync keeps or ends it); bound to a node
    # Slurm powers up 60 s ago, it has its join timeout from then. The chaos soak (seed 4)
    # found the planner terminating such an unbound orphan under seven running jobs.
    rebuilt = [
        replace(p4d_instance("i-u", InstanceState.ALLOCATED, 3600), origin=InstanceOrigin.ORPHAN),
        replace(
            p4d_instance("i-b", InstanceState.JOINING, 3600, node_name="b1"),
            origin=InstanceOrigin.ORPHAN,
            history=(Transition(InstanceState.ALLOCATED, InstanceState.JOINING, T0 - 60, "bound"),),
        ),
    ]
    assert (
        plan(snap(instances=tuple(rebuilt)), policy(), catalog(), Backoff(), T0).terminations == ()
    )
    # ... and a bound one that still has not joined a join timeout after its binding goes
    late = replace(rebuilt[1], history=(Transition(None, InstanceState.JOINING, T0 - 3600, "b"),))
    (t,) = plan(snap(instances=(late,)), policy(), catalog(), Backoff(), T0).terminations
    assert t.instance_id == "i-b" and t.decision.reason is ReasonCode.JOIN_TIMEOUT


def test_plan_is_deterministic_and_does_not_touch_its_input() -> None:
    s = snap(pending("a", 1, 8000), pending("b", 1, 1000), pending("c", 8, 50))
    before = copy.deepcopy(s)
    p1 = plan(s, policy(), catalog(), Backoff(), T0)
    p2 = plan(s, policy(), catalog(), Backoff(), T0)
    assert s == before
    assert p1 == p2


def test_job_of_another_gpu_model_never_waits_on_prem() -> None:
    cat = catalog(offer(), offer(itype="g6", gpus=1, od="1", spot="0.5", model="L4"))
    pol = policy(
        pools=[{"name": "aws-l4", "cloud": "aws", "regions": ["us-east-1"], "gpu_model": "L4"}]
    )
    p = plan(
        snap(pending("l4", 1, 100000, gpu_type="L4"), nodes=onprem_nodes(2, 4)),
        pol,
        cat,
        Backoff(),
        T0,
    )
    (up,) = p.scale_ups
    assert up.offer.instance_type == "g6"
    assert isinstance(up, ScaleUp)


def test_booting_node_already_holding_jobs_offers_only_its_free_gpus() -> None:
    inst = p4d_instance("i-1", InstanceState.JOINING, launched_ago=60, node_name="b1")
    booting = Node(
        name="b1",
        kind=NodeKind.BURST,
        gpus=8,
        gpus_alloc=6,
        gpu_type="a100",
        state=NodeState.POWERING_UP,
        pool="aws-a100",
        instance_id="i-1",
    )
    p = plan(
        snap(pending("a", 2, 100), pending("b", 2, 100), nodes=(*FULL, booting), instances=(inst,)),
        policy(),
        catalog(),
        Backoff(),
        T0,
    )
    r = reasons(p)
    assert r["a"] is ReasonCode.COVERED_BY_INFLIGHT
    assert r["b"] is ReasonCode.BURST_WAIT_EXCEEDS_BUDGET


def test_decisions_about_different_instances_have_different_ids() -> None:
    joining = [p4d_instance(i, InstanceState.JOINING, launched_ago=3600) for i in ("i-1", "i-2")]
    p = plan(snap(instances=tuple(joining)), policy(), catalog(), Backoff(), T0)
    ids = [t.decision.decision_id for t in p.terminations]
    assert len(ids) == 2 and len(set(ids)) == 2


def test_a_capped_wait_is_marked_a_lower_bound_not_shown_as_within_budget() -> None:
    # Issue 16 item 8: on-prem frees at +3600 s, but the search for job b stops at its budget
    # (500 s), so its predicted wait is only known to exceed what is reported.
    from provisioner.plan.explain import decision_to_dict

    a, b = pending("a", 1, runtime=8000), pending("b", 1, runtime=1000)
    p = plan(snap(a, b), policy(), catalog(), Backoff(), T0)
    da = next(d for d in p.decisions if d.job_ids == ("a",))
    (up,) = p.scale_ups
    db = up.decision
    assert db.predicted_wait_s is not None and db.predicted_wait_s < 3600
    assert db.wait_is_lower_bound and decision_to_dict(db)["predicted_wait_is_lower_bound"]
    assert da.predicted_wait_s == 3600 and not da.wait_is_lower_bound
    assert decision_to_dict(da)["predicted_wait_is_lower_bound"] is False


# --------------------------------------------------------------------------- Slurm power-ups


def powering_up(name: str = "cloud-aws-1", gpus: int = 1) -> Node:
    return Node(
        name=name,
        kind=NodeKind.BURST,
        gpus=gpus,
        gpu_type="a100",
        state=NodeState.POWERING_UP,
        pool="aws-a100",
    )


def placed(job_id: str, node: str, account: str = "ml") -> Job:
    """A job Slurm placed on a CLOUD node it is powering up (CONFIGURING, seen as running)."""
    return replace(running(job_id, 1, node, ends_in=1000), account=account)


TEAM_CAP = {"teams": {"research": {"monthly_usd": "100"}}, "team_of_account": {"ml": "research"}}


def test_a_node_slurm_powers_up_gets_the_cheapest_allowed_offer_from_plan() -> None:
    p = plan(
        snap(placed("s1", "cloud-aws-1"), nodes=(*FULL, powering_up())),
        policy(budgets=TEAM_CAP),
        catalog(),
        Backoff(),
        T0,
    )
    (up,) = p.scale_ups
    assert up.pool == "aws-a100" and up.nodes == 1 and up.job_ids == ("s1",)
    assert up.offer == OfferKey("aws", "us-east-1", "a2-1g", CapacityType.SPOT)
    d = up.decision
    assert d.reason is ReasonCode.BURST_URGENT and d.team == "research"
    assert (d.node, d.pool, d.detail) == ("cloud-aws-1", "aws-a100", {"by": "slurm"})


def test_a_spend_not_fully_known_holds_bursts_under_a_global_cap_only() -> None:
    """A cloud listed in part may run machines no record counts (the store restored from an
    older copy): with a $/h cap, no burst is bought until the listing is whole again, and
    the decision says why. Without a cap there is nothing to break."""
    gap = "gcp: instances listed in part, unreachable: zones/us-central1-b"
    s = snap(pending("b", 1, runtime=1000), spend=SpendState(unknown=gap))
    p = plan(s, policy(budgets={"global_usd_per_hour": "1000"}), catalog(), Backoff(), T0)
    assert reasons(p)["b"] is ReasonCode.BLOCKED_GLOBAL_BUDGET and not p.scale_ups
    (d,) = [d for d in p.decisions if d.job_ids == ("b",)]
    assert d.detail["spend_unknown"] == gap
    p = plan(s, policy(), catalog(), Backoff(), T0)
    assert [u.job_ids for u in p.scale_ups] == [("b",)]
    # a node Slurm powers up is held the same way
    spend = SpendState(unknown=gap)
    s = snap(placed("s1", "cloud-aws-1"), nodes=(*FULL, powering_up()), spend=spend)
    p = plan(s, policy(budgets={"global_usd_per_hour": "1000"}), catalog(), Backoff(), T0)
    (d,) = [d for d in p.decisions if d.node == "cloud-aws-1"]
    assert d.reason is ReasonCode.BLOCKED_GLOBAL_BUDGET and not p.scale_ups


def test_a_node_slurm_powers_up_cannot_spend_past_its_team_budget() -> None:
    """The bypass of issue 10 item 2: Slurm-driven power-ups skipped the team's monthly cap."""
    spend = SpendState(team_month_spent_usd={"research": Decimal("99.95")})
    p = plan(
        snap(placed("s1", "cloud-aws-1"), nodes=(*FULL, powering_up()), spend=spend),
        policy(budgets=TEAM_CAP),
        catalog(),
        Backoff(),
        T0,
    )
    assert not p.scale_ups
    (d,) = [d for d in p.decisions if d.node == "cloud-aws-1"]
    assert d.reason is ReasonCode.BLOCKED_TEAM_BUDGET and d.job_ids == ("s1",)
    # another team's job on the same kind of node is not blocked by research's budget
    other = placed("s2", "cloud-aws-1", account="other")
    p = plan(
        snap(other, nodes=(*FULL, powering_up()), spend=spend),
        policy(budgets=TEAM_CAP),
        catalog(),
        Backoff(),
        T0,
    )
    assert [u.job_ids for u in p.scale_ups] == [("s2",)]


def test_a_node_slurm_powers_up_respects_global_cap_pool_max_backoff_and_pause() -> None:
    nodes = (*FULL, powering_up())
    s = snap(placed("s1", "cloud-aws-1"), nodes=nodes, spend=SpendState(burn_usd_hr=Decimal("4.5")))
    p = plan(s, policy(budgets={"global_usd_per_hour": "5"}), catalog(), Backoff(), T0)
    assert not p.scale_ups and reasons(p)["s1"] is ReasonCode.BLOCKED_GLOBAL_BUDGET
    pol = policy(
        pools=[{"name": "aws-a100", "cloud": "aws", "regions": ["us-east-1"],
                "gpu_model": "A100", "max_nodes": 0}]
    )  # fmt: skip
    p = plan(snap(placed("s1", "cloud-aws-1"), nodes=nodes), pol, catalog(), Backoff(), T0)
    assert not p.scale_ups and reasons(p)["s1"] is ReasonCode.BLOCKED_POOL_MAX
    p = plan(snap(placed("s1", "cloud-aws-1"), nodes=nodes, paused=True), policy(), catalog(),
             Backoff(), T0)  # fmt: skip
    assert not p.scale_ups and reasons(p)["s1"] is ReasonCode.BLOCKED_PAUSED
    stale = snap(placed("s1", "cloud-aws-1"), nodes=nodes, stale=True)
    assert not plan(stale, policy(), catalog(), Backoff(), T0).scale_ups


def test_a_node_slurm_powers_up_takes_unbound_capacity_of_its_pool_first() -> None:
    booting = p4d_instance("i-1", InstanceState.REQUESTED, 10)
    s = snap(placed("s1", "cloud-aws-1"), nodes=(*FULL, powering_up()), instances=(booting,))
    p = plan(s, policy(), catalog(), Backoff(), T0)
    assert not p.scale_ups
    held = replace(booting, node_name="cloud-aws-1", state=InstanceState.JOINING)
    s = snap(placed("s1", "cloud-aws-1"), nodes=(*FULL, powering_up()), instances=(held,))
    assert not plan(s, policy(), catalog(), Backoff(), T0).scale_ups
