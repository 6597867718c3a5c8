"""Which offers a scale-up may fall back to when the chosen one has no capacity: decided by the
planner, carried on `ScaleUp.fallbacks`, tried in order by the actuator."""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.config.models import PoolPolicy
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import Decision, Rejection
from provisioner.plan.catalog import Catalog
from provisioner.plan.matching import OfferRequest, offer_fits
from provisioner.plan.ranking import pool_request


def pool_capacities(pool: PoolPolicy) -> tuple[CapacityType, ...]:
    """The capacity types a pool may buy."""
    if pool.capacity == "spot":
        return (CapacityType.SPOT,)
    if pool.capacity == "on-demand":
        return (CapacityType.ON_DEMAND,)
    return (CapacityType.SPOT, CapacityType.ON_DEMAND)


def fallback_offers(
    d: Decision,
    pool: PoolPolicy,
    chosen: OfferKey,
    gpus_per_node: int,
    nodes: int,
    catalog: Catalog,
    equivalents: Sequence[str],
) -> tuple[OfferKey, ...]:
    """The costlier alternatives the decision lists that the same pool allows, with the same
    node shape, and within the budget headroom left after the chosen one; in the decision's
    (cheapest first) order."""
    picked = next((a for a in d.alternatives if a.chosen), None)
    allowed_caps = pool_capacities(pool)
    req: OfferRequest | None = None  # built for the first offer of the right shape only
    out: list[OfferKey] = []
    for a in d.alternatives:
        if a.chosen or a.rejected_because not in (None, Rejection.COSTLIER):
            continue
        # Cheapest tests first: comparing keys field by field costs more than these.
        if a.offer.cloud != pool.cloud or a.offer.capacity not in allowed_caps:
            continue
        offer = catalog.get(a.offer)
        if offer is None or offer.whole_gpus != gpus_per_node:
            continue
        if a.offer == chosen or a.offer in out:
            continue
        if req is None:
            req = pool_request(pool, gpus_per_node, equivalents)
        if not offer_fits(offer, req, a.offer.capacity):
            continue
        if picked is not None:
            extra_hr = (a.usd_per_hour - picked.usd_per_hour) * nodes
            if d.global_headroom_usd_hr is not None and extra_hr > d.global_headroom_usd_hr:
                continue
            extra = a.expected_cost_usd - picked.expected_cost_usd
            if d.team_headroom_usd is not None and extra > d.team_headroom_usd:
                continue
        out.append(a.offer)
    return tuple(out)
