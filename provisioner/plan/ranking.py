"""Offer ranking: the lowest expected cost for a job, spot adjusted by interruption risk."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from provisioner.config.models import PoolPolicy, SpotRisk
from provisioner.domain.offers import CapacityType, Offer, OfferKey
from provisioner.plan.catalog import Catalog
from provisioner.plan.matching import OfferRequest, offer_fits


@dataclass(frozen=True, slots=True)
class Candidate:
    """One way to run a job in the cloud: an offer bought as some capacity, through a pool.

    `gpus_per_node` is what each node has (and is billed for), which may exceed what the job
    uses: the planner packs other jobs into the rest."""

    pool: str
    key: OfferKey
    offer: Offer
    nodes: int
    gpus_per_node: int
    usd_hr_per_node: Decimal
    boot_s: float
    interruption_pct: float
    # Derived once: expected_cost and rank run for every pending job of a pass, and turning
    # the Decimal price into a float (or the key into text) each time was most of their cost.
    _usd_hr: Decimal = field(init=False, repr=False, compare=False)
    _usd_hr_float: float = field(init=False, repr=False, compare=False)
    _spot: bool = field(init=False, repr=False, compare=False)
    key_text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_usd_hr", self.usd_hr_per_node * self.nodes)
        object.__setattr__(self, "_usd_hr_float", float(self._usd_hr))
        object.__setattr__(self, "_spot", self.key.capacity is CapacityType.SPOT)
        object.__setattr__(self, "key_text", str(self.key))

    @property
    def usd_hr(self) -> Decimal:
        return self._usd_hr

    def expected_cost(self, runtime_s: float, risk: SpotRisk) -> float:
        """$ for boot + runtime, plus the expected rework if spot capacity is reclaimed."""
        hours = (runtime_s + self.boot_s) / 3600.0
        base = self._usd_hr_float * hours
        if self._spot:
            rate = self.interruption_pct / 100.0 / risk.reference_hours
            p = 1.0 - math.exp(-rate * hours)
            base *= 1.0 + p * risk.rework_fraction
        return base


def pool_request(pool: PoolPolicy, gpus_per_node: int, equivalents: Sequence[str]) -> OfferRequest:
    return OfferRequest(
        gpus_per_node=gpus_per_node,
        gpu_model=pool.gpu_model,
        equivalent_models=tuple(equivalents),
        min_gpu_mem_gb=pool.min_gpu_mem_gb,
        clouds=(pool.cloud,),
        regions=tuple(pool.regions),
        instance_types=tuple(pool.instance_types),
    )


def candidates_for(
    gpus: int,
    gpu_model: str,
    pools: Sequence[PoolPolicy],
    catalog: Catalog,
    capacities: Sequence[CapacityType],
    risk: SpotRisk,
    equivalents: Sequence[str] = (),
) -> list[Candidate]:
    """Every (pool, offer, capacity) that can hold a job of `gpus` GPUs of `gpu_model`."""
    out: list[Candidate] = []
    wanted = {gpu_model.lower(), *(m.lower() for m in equivalents)}
    for pool in pools:
        if pool.gpu_model and pool.gpu_model.lower() not in wanted:
            continue
        pool_caps = [c for c in capacities if pool.capacity == "any" or pool.capacity == c.value]
        if not pool_caps:
            continue
        offers = list(catalog.for_model(gpu_model))
        for eq in equivalents:
            offers.extend(catalog.for_model(eq))
        # offer_fits rejects other clouds too; dropping them first only saves time.
        offers = [o for o in offers if o.cloud == pool.cloud]
        reqs: dict[int, OfferRequest] = {}  # one request per GPUs-per-node, not per offer
        for offer in offers:
            per_node = offer.whole_gpus
            if per_node < 1:
                continue
            nodes = 1 if gpus <= per_node else math.ceil(gpus / per_node)
            need_per_node = min(gpus, per_node)
            req = reqs.get(need_per_node)
            if req is None:
                req = reqs[need_per_node] = pool_request(pool, need_per_node, equivalents)
            for cap in pool_caps:
                if not offer_fits(offer, req, cap):
                    continue
                price = offer.price(cap)
                assert price is not None  # offer_fits checked spot availability
                if cap is CapacityType.SPOT:
                    pct = (
                        float(offer.spot_interruption_pct_max)
                        if offer.spot_interruption_pct_max is not None
                        else risk.default_interruption_pct
                    )
                else:
                    pct = 0.0
                out.append(
                    Candidate(
                        pool=pool.name,
                        key=offer.key(cap),
                        offer=offer,
                        nodes=nodes,
                        gpus_per_node=per_node,
                        usd_hr_per_node=price,
                        boot_s=pool.boot_seconds,
                        interruption_pct=pct,
                    )
                )
    return out


def rank(cands: Sequence[Candidate], runtime_s: float, risk: SpotRisk) -> list[Candidate]:
    """Cheapest expected cost first; ties broken by the offer key so ranking is deterministic."""
    return sorted(cands, key=lambda c: (c.expected_cost(runtime_s, risk), c.key_text, c.pool))
