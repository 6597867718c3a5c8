"""Builders shared by the store tests (a uniquely named module, not conftest)."""

from __future__ import annotations

from decimal import Decimal

from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.offers import CapacityType, OfferKey

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def make_instance(
    instance_id: str = "i-1",
    *,
    state: InstanceState = InstanceState.REQUESTED,
    launched_ts: float = T0,
    pool: str = "aws-a100",
    price: str = "32.7726",
    gpus: int = 8,
) -> CloudInstance:
    return CloudInstance(
        instance_id=instance_id,
        pool=pool,
        offer=OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.ON_DEMAND),
        gpu_model="A100",
        gpus=gpus,
        price_usd_hr=Decimal(price),
        state=state,
        launched_ts=launched_ts,
        decision_id="d-1",
    )
