"""Builders shared by the accounting tests (a uniquely named module, not conftest)."""

from __future__ import annotations

from decimal import Decimal

from provisioner.config.models import Budgets, OnPrem, Policy, TeamBudget
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.store import Store

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
DAY = 86_400.0

POLICY = Policy(
    onprem=OnPrem(amortized_usd_per_gpu_hour=Decimal("1.20"), energy_usd_per_kwh=Decimal("0.12")),
    budgets=Budgets(
        global_usd_per_hour=Decimal("100"),
        teams={"vision": TeamBudget(monthly_usd=Decimal("1000"))},
        team_of_account={"acct-v": "vision", "acct-n": "nlp"},
    ),
)


def launch(
    store: Store,
    instance_id: str,
    *,
    at: float,
    price: str = "10",
    gpus: int = 4,
    team: str = "vision",
    pool: str = "aws-a100",
    capacity: CapacityType = CapacityType.ON_DEMAND,
    node: str = "",
) -> None:
    """An instance recorded already running (allocated) at `at`."""
    store.add_instance(
        CloudInstance(
            instance_id=instance_id,
            pool=pool,
            offer=OfferKey("aws", "us-east-1", "g5.12xlarge", capacity),
            gpu_model="A10G",
            gpus=gpus,
            price_usd_hr=Decimal(price),
            state=InstanceState.ALLOCATED,
            launched_ts=at,
            decision_id=f"d-{instance_id}",
            node_name=node or f"node-{instance_id}",
        ),
        team=team,
    )


def terminate(store: Store, instance_id: str, at: float) -> None:
    store.transition(instance_id, InstanceState.TERMINATED, at, "test")
