"""What a pool costs: $/h at its maximum size, and $/month at its expected use (Decimal throughout).

Every (region, instance type) the pool may use is an option. At max size a pool of `max_nodes`
nodes costs `max_nodes × price` per hour; the report shows the cheapest option and the range, for
on-demand and for spot (only the capacity types the pool allows). The expected monthly spend is
`expected use × 730 h × max_nodes × the cheapest $/h the pool may use` (spot when the pool allows
it and the catalog has a spot price, else on-demand): the planner picks the cheapest offer, so this
is what a pool that is busy `expected use` of the time costs; its upper bound at the dearest
allowed option is given too.

`expected use` is the pool's busy fraction. The policy model has no field for it yet: a pool's
`expected_utilization` is used when present, else the review default (`DEFAULT_EXPECTED_USE`,
`--expected-use`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from provisioner.act.ports import PoolSpec
from provisioner.config.models import PoolPolicy
from provisioner.domain.money import to_cents
from provisioner.domain.offers import CapacityType, Offer
from provisioner.plan.fallbacks import pool_capacities

DEFAULT_EXPECTED_USE = Decimal("0.25")
HOURS_PER_MONTH = Decimal("730")


@dataclass(frozen=True)
class PriceRange:
    min: Decimal
    max: Decimal
    cheapest: str  # "us-east-1/p4d.24xlarge"

    def to_dict(self) -> dict[str, Any]:
        return {"min": str(self.min), "max": str(self.max), "cheapest": self.cheapest}


@dataclass(frozen=True)
class OptionCost:
    region: str
    instance_type: str
    gpus: int
    on_demand_usd_hr: Decimal | None  # per node; None when the pool does not allow on-demand
    spot_usd_hr: Decimal | None  # per node; None when not allowed or no spot price

    def to_dict(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "instance_type": self.instance_type,
            "gpus": self.gpus,
            "on_demand_usd_hr": _s(self.on_demand_usd_hr),
            "spot_usd_hr": _s(self.spot_usd_hr),
        }


@dataclass(frozen=True)
class PoolCost:
    pool: str
    max_nodes: int
    capacity: str
    expected_use: Decimal
    expected_use_source: str  # "policy" | "review default"
    options: tuple[OptionCost, ...] = ()
    on_demand_usd_hr_at_max: PriceRange | None = None
    spot_usd_hr_at_max: PriceRange | None = None
    expected_usd_month: Decimal | None = None
    expected_usd_month_max: Decimal | None = None
    expected_basis: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def max_usd_hr(self) -> Decimal | None:
        """The dearest hour the pool can cost (max size, dearest allowed option)."""
        highs = [r.max for r in (self.on_demand_usd_hr_at_max, self.spot_usd_hr_at_max) if r]
        return max(highs) if highs else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "max_nodes": self.max_nodes,
            "capacity": self.capacity,
            "expected_use": str(self.expected_use),
            "expected_use_source": self.expected_use_source,
            "on_demand_usd_hr_at_max": _r(self.on_demand_usd_hr_at_max),
            "spot_usd_hr_at_max": _r(self.spot_usd_hr_at_max),
            "max_usd_hr": _s(self.max_usd_hr),
            "expected_usd_month": _s(self.expected_usd_month),
            "expected_usd_month_max": _s(self.expected_usd_month_max),
            "expected_basis": self.expected_basis,
            "options": [o.to_dict() for o in self.options],
            "notes": list(self.notes),
        }


def _s(d: Decimal | None) -> str | None:
    return None if d is None else str(d)


def _r(r: PriceRange | None) -> dict[str, Any] | None:
    return None if r is None else r.to_dict()


def expected_use_for(pool: PoolPolicy, default: Decimal) -> tuple[Decimal, str]:
    declared = getattr(pool, "expected_utilization", None)
    if declared is not None:
        return Decimal(str(declared)), "policy"
    return default, "review default"


def _range(prices: Mapping[str, Decimal], nodes: int) -> PriceRange | None:
    if not prices:
        return None
    cheapest = min(prices, key=lambda k: (prices[k], k))
    return PriceRange(
        min=prices[cheapest] * nodes, max=max(prices.values()) * nodes, cheapest=cheapest
    )


def price_pool(
    pool: PoolPolicy,
    specs: Iterable[PoolSpec],
    catalog: Iterable[Offer],
    *,
    expected_use: Decimal = DEFAULT_EXPECTED_USE,
) -> PoolCost:
    """The cost of one pool over the node groups it renders to (`specs` of this pool)."""
    use, source = expected_use_for(pool, expected_use)
    index = {(o.cloud, o.region, o.instance_type): o for o in catalog}
    allowed = set(pool_capacities(pool))
    options: dict[tuple[str, str], OptionCost] = {}
    notes: list[str] = []
    for spec in specs:
        if spec.pool != pool.name or (spec.region, spec.instance_type) in options:
            continue
        offer = index.get((spec.cloud, spec.region, spec.instance_type))
        if offer is None:
            notes.append(f"{spec.region}/{spec.instance_type}: not in the catalog, not priced")
            continue
        options[(spec.region, spec.instance_type)] = OptionCost(
            region=spec.region,
            instance_type=spec.instance_type,
            gpus=offer.whole_gpus,
            on_demand_usd_hr=offer.ondemand_usd_hr if CapacityType.ON_DEMAND in allowed else None,
            spot_usd_hr=offer.spot_usd_hr if CapacityType.SPOT in allowed else None,
        )
    opts = sorted(options.values(), key=lambda o: (o.region, o.instance_type))
    od = {
        f"{o.region}/{o.instance_type}": o.on_demand_usd_hr
        for o in opts
        if o.on_demand_usd_hr is not None
    }
    spot = {
        f"{o.region}/{o.instance_type}": o.spot_usd_hr for o in opts if o.spot_usd_hr is not None
    }
    nodes = pool.max_nodes
    od_range, spot_range = _range(od, nodes), _range(spot, nodes)
    # The cheapest $/h the pool may use: spot first (when allowed and priced), else on-demand.
    basis_range, basis_kind = (spot_range, "spot") if spot_range else (od_range, "on-demand")
    highs = [r.max for r in (od_range, spot_range) if r]
    expected = expected_max = None
    basis = ""
    if basis_range is not None:
        factor = use * HOURS_PER_MONTH
        expected = to_cents(basis_range.min * factor)
        expected_max = to_cents(max(highs) * factor)
        basis = f"{basis_kind} {basis_range.cheapest}"
    elif not opts:
        notes.append("no catalog offer fits this pool: nothing to price")
    return PoolCost(
        pool=pool.name,
        max_nodes=nodes,
        capacity=pool.capacity,
        expected_use=use,
        expected_use_source=source,
        options=tuple(opts),
        on_demand_usd_hr_at_max=od_range,
        spot_usd_hr_at_max=spot_range,
        expected_usd_month=expected,
        expected_usd_month_max=expected_max,
        expected_basis=basis,
        notes=tuple(notes),
    )
