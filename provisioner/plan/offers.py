"""The planner's offer ranking, for the callers outside plan/ that need to price offers the way
the planner does: the simulator's baseline policies and bills, and the doctor's catalog check.
They never rank offers themselves (`make lint` checks that only plan/ imports the ranking)."""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.config.models import PoolPolicy, SpotRisk
from provisioner.domain.offers import CapacityType
from provisioner.plan.catalog import Catalog
from provisioner.plan.ranking import Candidate, candidates_for, rank

__all__ = ["Candidate", "offers_for", "ranked_offers"]


def offers_for(
    gpus: int,
    gpu_model: str,
    pools: Sequence[PoolPolicy],
    catalog: Catalog,
    capacities: Sequence[CapacityType],
    risk: SpotRisk,
    equivalents: Sequence[str] = (),
) -> list[Candidate]:
    """Every way the pools can hold `gpus` GPUs of `gpu_model`, unranked."""
    return candidates_for(gpus, gpu_model, pools, catalog, capacities, risk, equivalents)


def ranked_offers(
    gpus: int,
    gpu_model: str,
    pools: Sequence[PoolPolicy],
    catalog: Catalog,
    capacities: Sequence[CapacityType],
    risk: SpotRisk,
    runtime_s: float,
    equivalents: Sequence[str] = (),
) -> list[Candidate]:
    """The same, cheapest expected cost for `runtime_s` first, as the planner ranks them."""
    cands = candidates_for(gpus, gpu_model, pools, catalog, capacities, risk, equivalents)
    return rank(cands, runtime_s, risk)
