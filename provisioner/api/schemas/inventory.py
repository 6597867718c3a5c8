"""Burst pools and cloud instances (`render.pool_dict`, `render.instance_dict`)."""

from __future__ import annotations

from pydantic import Field

from provisioner.api.schemas.common import IsoTime, Money, Out
from provisioner.domain.instances import InstanceState
from provisioner.domain.offers import CapacityType


class PoolOut(Out):
    name: str
    cloud: str
    regions: list[str]
    partition: str
    team: str
    gpu_model: str
    capacity: str
    max_nodes: int
    drained: bool
    drained_at: IsoTime | None
    drained_by: str | None
    live_instances: int
    usd_per_hour: Money


class TransitionOut(Out):
    """One step of an instance's lifecycle."""

    from_: InstanceState | None = Field(alias="from")
    to: InstanceState
    at: IsoTime | None = Field(description="When the controller saw the step, on its own clock.")
    cloud_at: IsoTime | None = Field(
        default=None,
        description="The cloud's own stamp for the step (a launch, a termination), translated "
        "by the measured skew and clamped into what the controller saw: billing starts or ends "
        "there. Null when the cloud gave none.",
    )
    reason: str


class InstanceOut(Out):
    instance_id: str
    pool: str
    offer: str = Field(description="cloud/region/instance type/capacity")
    cloud: str
    region: str
    instance_type: str
    capacity: CapacityType
    gpu_model: str
    gpus: int
    price_usd_hr: Money = Field(description="The price at launch, $/h.")
    state: InstanceState
    entered_state_at: IsoTime | None
    launched_at: IsoTime | None
    ended_at: IsoTime | None
    node_name: str | None
    decision_id: str | None
    team: str | None
    billed_until: IsoTime | None
    billed_seconds: float
    history: list[TransitionOut]


__all__ = ["InstanceOut", "PoolOut", "TransitionOut"]
