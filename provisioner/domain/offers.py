"""Normalised, priced cloud offers."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from provisioner.domain.errors import InvalidArgument


class CapacityType(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"


@dataclass(frozen=True, slots=True, order=True)
class OfferKey:
    """What the planner chooses and what back-off is keyed by."""

    cloud: str
    region: str
    instance_type: str
    capacity: CapacityType

    def __str__(self) -> str:
        # .value: what f"{capacity}" prints for a StrEnum, without the Enum's format call
        return f"{self.cloud}/{self.region}/{self.instance_type}/{self.capacity.value}"

    @classmethod
    def parse(cls, text: str) -> OfferKey:
        parts = text.split("/")
        if len(parts) != 4:
            raise InvalidArgument(f"offer key {text!r} is not cloud/region/instance_type/capacity")
        return cls(parts[0], parts[1], parts[2], CapacityType(parts[3]))


@dataclass(frozen=True, slots=True)
class Offer:
    """One instance type in one region, with its on-demand and (optional) spot price."""

    cloud: str
    region: str
    instance_type: str
    gpu_model: str
    gpus_per_node: float
    gpu_mem_gb: float | None
    vcpus: int
    mem_gb: float
    ondemand_usd_hr: Decimal
    spot_usd_hr: Decimal | None = None
    spot_interruption_pct_max: int | None = None

    def key(self, capacity: CapacityType) -> OfferKey:
        return OfferKey(self.cloud, self.region, self.instance_type, capacity)

    def price(self, capacity: CapacityType) -> Decimal | None:
        return self.ondemand_usd_hr if capacity is CapacityType.ON_DEMAND else self.spot_usd_hr

    @property
    def whole_gpus(self) -> int:
        return int(self.gpus_per_node) if self.gpus_per_node >= 1 else 0


def zone_in_region(zone: str, region: str) -> bool:
    """us-east-1a and us-east-1-bos-1a are us-east-1's zones; us-central1-a is us-central1's."""
    return zone.startswith(f"{region}-") or zone[:-1] == region
