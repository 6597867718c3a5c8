"""Cloud money that bought nothing: the dollars of instances that never ran a job, over all
cloud dollars. The demo's benchmark (bench/demo_waste.py) computes the same share from outside
the product (moto's instance records and the demo Slurm's job log); the console's Overview shows
this one, so a user sees the tool's own waste at a glance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from provisioner.domain.records import CLOUD_KINDS


class InstanceCosts(Protocol):
    def instance_costs(
        self, from_ts: float, to_ts: float, kinds: Sequence[str]
    ) -> dict[str, tuple[Decimal, Decimal]]: ...


@dataclass(frozen=True, slots=True)
class CloudWaste:
    cloud_usd: Decimal
    wasted_usd: Decimal  # on instances that never ran a job
    instances: int
    wasted_instances: int

    @property
    def share(self) -> float | None:
        """wasted / cloud dollars (None: no cloud dollars yet)."""
        return float(self.wasted_usd / self.cloud_usd) if self.cloud_usd > 0 else None


def cloud_waste(ledger: InstanceCosts, from_ts: float, to_ts: float) -> CloudWaste:
    """The ledger's cloud rows starting in [from_ts, to_ts), per instance: one with no job row
    never ran a job, and all it cost is waste (booted, idle, unbound or orphan time)."""
    costs = ledger.instance_costs(from_ts, to_ts, CLOUD_KINDS)
    wasted = [total for total, jobs in costs.values() if jobs == 0]
    return CloudWaste(
        cloud_usd=sum((total for total, _ in costs.values()), Decimal(0)),
        wasted_usd=sum(wasted, Decimal(0)),
        instances=len(costs),
        wasted_instances=len(wasted),
    )
