"""GPU efficiency and waste (`account/efficiency.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from provisioner.api.schemas.common import IsoTime, Money, Out


class EfficiencyRowOut(Out):
    key: str = Field(description='The group\'s team, project, pool or node ("" unattributed).')
    gpu_hours_paid: float = Field(description="GPU-hours of the ledger's GPU-hour rows.")
    gpu_hours_used_util: float = Field(description="NVML utilisation × hours.")
    gpu_hours_used_busy: float = Field(description="Hours with a process on the GPU.")
    gpu_hours_observed: float = Field(description="Hours NVML watched the GPUs.")
    efficiency_util: float | None = Field(description="used (util) / paid; null: none paid.")
    efficiency_busy: float | None = Field(description="used (busy) / paid; null: none paid.")
    cost_usd: Money
    idle_usd: Money
    never_ran_usd: Money


class EfficiencyOut(Out):
    from_: IsoTime = Field(alias="from")
    to: IsoTime
    group_by: Literal["team", "project", "pool", "node"]
    currency: Literal["USD"]
    rows: list[EfficiencyRowOut]
    total: EfficiencyRowOut
