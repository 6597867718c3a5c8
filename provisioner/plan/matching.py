"""The one pure predicate deciding whether an offer can serve a request."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from provisioner.domain.offers import CapacityType, Offer


@dataclass(frozen=True, slots=True)
class OfferRequest:
    """What a job (or a pool) needs from one node."""

    gpus_per_node: int
    gpu_model: str | None = None
    equivalent_models: Collection[str] = ()
    min_gpu_mem_gb: float | None = None
    clouds: Collection[str] = ()
    regions: Collection[str] = ()
    instance_types: Collection[str] = ()
    capacity: CapacityType | None = None  # None: either


def offer_fits(offer: Offer, req: OfferRequest, capacity: CapacityType) -> bool:
    """True when `offer`, bought as `capacity`, can hold `req` on one node."""
    if req.capacity is not None and capacity is not req.capacity:
        return False
    if capacity is CapacityType.SPOT and offer.spot_usd_hr is None:
        return False
    if offer.gpus_per_node < 1 or offer.whole_gpus < req.gpus_per_node:
        return False
    if req.gpu_model is not None:
        model = offer.gpu_model.lower()
        if model != req.gpu_model.lower() and all(
            model != m.lower() for m in req.equivalent_models
        ):
            return False
    if req.min_gpu_mem_gb is not None and (
        offer.gpu_mem_gb is None or offer.gpu_mem_gb < req.min_gpu_mem_gb
    ):
        return False
    if req.clouds and offer.cloud not in req.clouds:
        return False
    if req.regions and offer.region not in req.regions:
        return False
    return not (req.instance_types and offer.instance_type not in req.instance_types)
