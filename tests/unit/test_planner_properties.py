"""Properties of the planner over random snapshots (hypothesis)."""

from __future__ import annotations

import copy
import math
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.domain.jobs import Job
from provisioner.domain.snapshot import ClusterSnapshot, SpendState
from provisioner.plan.backoff import Backoff
from provisioner.plan.planner import plan
from tests.unit.helpers import T0, catalog, offer, onprem_nodes, policy, running

CATALOG = catalog(
    offer(itype="p4d", gpus=8, od="32", spot="8"),
    offer(itype="a2-1g", gpus=1, od="4", spot="1"),
    offer(cloud="aws", region="us-east-1", itype="a2-2g", gpus=2, od="7.5", spot=None),
)

pending_jobs = st.lists(
    st.tuples(
        st.sampled_from([1, 1, 1, 2, 4, 8, 12, 16]),
        st.floats(min_value=10, max_value=200_000),
        st.floats(min_value=0, max_value=20_000),
        st.sampled_from(["ml", "cv", "nlp"]),
    ),
    max_size=40,
)


def build(jobs, burn: Decimal) -> ClusterSnapshot:
    return ClusterSnapshot(
        taken_ts=T0,
        jobs=(
            running("r1", 4, "onprem-1", 5000),
            running("r2", 4, "onprem-2", 9000),
            *(
                Job(job_id=f"p{i}", gpus=g, submit_ts=T0 - age, expected_runtime_s=rt, account=acct)
                for i, (g, rt, age, acct) in enumerate(jobs)
            ),
        ),
        nodes=onprem_nodes(2, 4, alloc=4),
        spend=SpendState(
            burn_usd_hr=burn,
            team_month_spent_usd={"research": Decimal("10")},
        ),
    )


@settings(max_examples=150, deadline=None)
@given(
    jobs=pending_jobs,
    cap=st.integers(min_value=0, max_value=120),
    burn=st.integers(min_value=0, max_value=60),
    team_cap=st.integers(min_value=0, max_value=200),
)
def test_planned_spend_never_exceeds_budgets(jobs, cap, burn, team_cap) -> None:
    pol = policy(
        budgets={
            "global_usd_per_hour": str(cap),
            "teams": {"research": {"monthly_usd": str(team_cap)}},
            "team_of_account": {"ml": "research", "cv": "research"},
        }
    )
    snap = build(jobs, Decimal(burn))
    p = plan(snap, pol, CATALOG, Backoff(), T0)
    planned = p.planned_usd_per_hour
    assert Decimal(burn) + planned <= Decimal(cap) or planned == 0
    research = sum(
        (
            a.expected_cost_usd
            for up in p.scale_ups
            if up.decision.team == "research"
            for a in up.decision.alternatives
            if a.chosen
        ),
        Decimal(0),
    )
    assert research <= Decimal(team_cap) - Decimal("10") or research == 0


@settings(max_examples=150, deadline=None)
@given(jobs=pending_jobs)
def test_never_more_nodes_than_pending_demand_needs(jobs) -> None:
    p = plan(build(jobs, Decimal(0)), policy(), CATALOG, Backoff(), T0)
    demand = {f"p{i}": g for i, (g, _, _, _) in enumerate(jobs)}
    for up in p.scale_ups:
        gpus = sum(demand[j] for j in up.job_ids)
        # the nodes bought are the fewest of that shape that hold the jobs
        assert (up.nodes - 1) * up.gpus_per_node < gpus <= up.nodes * up.gpus_per_node
        assert up.nodes == math.ceil(gpus / up.gpus_per_node)
    assert sum(up.nodes for up in p.scale_ups) <= sum(demand.values())
    bursting = {j for up in p.scale_ups for j in up.job_ids}
    assert len(bursting) == sum(len(up.job_ids) for up in p.scale_ups)  # no job twice


@settings(max_examples=100, deadline=None)
@given(jobs=pending_jobs)
def test_planner_never_mutates_its_input(jobs) -> None:
    snap = build(jobs, Decimal(3))
    pol = policy()
    before_snap, before_pol = copy.deepcopy(snap), pol.model_copy(deep=True)
    backoff = Backoff()
    plan(snap, pol, CATALOG, backoff, T0)
    assert snap == before_snap
    assert pol == before_pol
    assert backoff == Backoff()
