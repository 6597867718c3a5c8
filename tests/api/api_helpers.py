"""Builders shared by the API tests (a uniquely named module, not conftest)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from fastapi.testclient import TestClient

from provisioner.account.ledger import Accountant
from provisioner.api.app import ApiDeps, create_app
from provisioner.api.auth import Role, create_token
from provisioner.clock import ManualClock
from provisioner.config.models import Budgets, OnPrem, Policy, PoolPolicy, TeamBudget
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import Alternative, Decision, Plan, ReasonCode, Rejection, ScaleUp
from provisioner.domain.records import JobUsage, NewIntent
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.munge_credentials import MungeDecoder
from provisioner.observe.spot_inbox import SpotInbox
from provisioner.store import Store

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
NOW = T0 + 10 * 86_400.0
OFFER = OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT)
OTHER = OfferKey("gcp", "us-central1", "a2-highgpu-8g", CapacityType.ON_DEMAND)

POLICY = Policy(
    onprem=OnPrem(amortized_usd_per_gpu_hour=Decimal("1.20")),
    pools=[
        PoolPolicy(name="aws-a100", cloud="aws", regions=["us-east-1"], gpu_model="A100"),
        PoolPolicy(name="gcp-a100", cloud="gcp", regions=["us-central1"], gpu_model="A100"),
    ],
    budgets=Budgets(
        global_usd_per_hour=Decimal("200"),
        teams={"vision": TeamBudget(monthly_usd=Decimal("5000"))},
        team_of_account={"acct-v": "vision"},
    ),
)


def decision(i: int = 1) -> Decision:
    return Decision(
        decision_id=f"d-{i}",
        reason=ReasonCode.BURST_WAIT_EXCEEDS_BUDGET,
        job_ids=("101",),
        chosen=OFFER,
        alternatives=(
            Alternative(OFFER, Decimal("9.83"), Decimal("19.66"), chosen=True),
            Alternative(
                OTHER, Decimal("29.39"), Decimal("58.78"), rejected_because=Rejection.COSTLIER
            ),
        ),
        predicted_wait_s=7200.0,
        wait_budget_s=1800.0,
        wait_saved_s=5400.0,
        global_headroom_usd_hr=Decimal("190.17"),
        team_headroom_usd=Decimal("4000"),
        team="vision",
    )


def a_plan() -> Plan:
    d = decision(99)
    return Plan(
        created_ts=NOW,
        actions=(ScaleUp("aws-a100", OFFER, 1, 8, Decimal("9.83"), ("101",), d),),
        decisions=(d,),
        predicted_start_ts={"101": NOW + 300},
    )


def a_snapshot() -> ClusterSnapshot:
    return ClusterSnapshot(
        taken_ts=NOW,
        jobs=(
            Job("201", 8, NOW - 600, partition="onprem"),
            Job("202", 4, NOW - 60, partition="cloud"),
            Job("101", 8, NOW - 9000, state=JobState.RUNNING, start_ts=NOW - 3000),
        ),
        nodes=(
            Node("gpu-01", NodeKind.ONPREM, 8, 8, state=NodeState.ALLOCATED),
            Node("gpu-02", NodeKind.ONPREM, 8, 0, state=NodeState.IDLE),
            Node("cloud-1", NodeKind.BURST, 8, 8, state=NodeState.ALLOCATED),
        ),
    )


def seed(store: Store) -> None:
    store.sync_pools(POLICY.pools, T0)
    store.sync_budgets(POLICY.budgets, T0)
    store.record_decisions([decision(1)], NOW - 4000)
    store.set_iac_review("d-1", "+ aws:autoscaling:Group burst-aws-a100", "text")
    inst = CloudInstance(
        "i-1",
        "aws-a100",
        OFFER,
        "A100",
        8,
        Decimal("9.83"),
        InstanceState.REQUESTED,
        NOW - 3900,
        decision_id="d-1",
        node_name="cloud-1",
    )
    store.record_intent(
        NewIntent(
            "scale_up",
            "tok-1",
            NOW - 3950,
            pool="aws-a100",
            offer=OFFER,
            nodes=1,
            decision_id="d-1",
            team="vision",
        )
    )
    store.confirm("tok-1", NOW - 3900, instances=[inst])
    store.transition("i-1", InstanceState.ALLOCATED, NOW - 3800, "running")
    store.transition("i-1", InstanceState.READY, NOW - 3600, "slurmd up")
    store.record_intent(
        NewIntent("scale_up", "tok-2", NOW - 100, pool="gcp-a100", offer=OTHER, nodes=1)
    )
    store.fail_intent("tok-2", NOW - 90, "capacity", "ZONE_RESOURCE_POOL_EXHAUSTED")
    store.record_job_usage(
        [
            JobUsage(
                "101",
                "cloud-1",
                8,
                NOW - 3000,
                None,
                instance_id="i-1",
                account="acct-v",
                user="ann",
                partition="cloud",
            ),
            JobUsage(
                "100",
                "gpu-01",
                8,
                NOW - 7200,
                NOW - 3600,
                account="acct-v",
                user="ann",
                partition="onprem",
            ),
        ]
    )
    Accountant(store, POLICY).run(NOW - 60)


@dataclass
class Env:
    store: Store
    clock: ManualClock
    client: TestClient
    tokens: dict[str, str]
    deps: ApiDeps

    def h(self, role: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}


def make_env(store: Store, *, planner: bool = True, **kw) -> Env:
    clock = ManualClock(datetime.fromtimestamp(NOW, UTC))
    deps = ApiDeps(
        store=store,
        clock=clock,
        planner=a_plan if planner else None,
        snapshot=a_snapshot,
        status_extra=lambda: {"last_pass": "ok"},
        # as the controller builds it; no munged answers here, so every credential is refused
        spot_inbox=SpotInbox(),
        munge=MungeDecoder("/nonexistent/munge.sock"),
        **kw,
    )
    tokens = {
        r.label: create_token(store, r, f"{r.label}-bot", T0) for r in Role if r.name != "AGENT"
    }
    revoked = create_token(store, Role.ADMIN, "old", T0)
    store.revoke_token(revoked.split("_")[1], T0 + 1)
    tokens["revoked"] = revoked
    client = TestClient(create_app(deps), raise_server_exceptions=False)
    return Env(store, clock, client, tokens, deps)
