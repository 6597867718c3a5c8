"""The planner, not the actuator, chooses what a scale-up falls back to when its offer has no
capacity: costlier offers of the same pool and node shape, cheapest first, within headroom.
Expected orders are worked out by hand from the prices below."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import Rejection
from provisioner.domain.snapshot import ClusterSnapshot, SpendState
from provisioner.plan.backoff import Backoff
from provisioner.plan.planner import plan
from provisioner.plan.rank_cache import MAX_FALLBACK_MEMO, RankCache
from tests.unit.helpers import T0, catalog, offer, onprem_nodes, pending, policy, running

SPOT, OD = CapacityType.SPOT, CapacityType.ON_DEMAND
# 1-GPU offers at $1 (spot) / $4 (on-demand) and $2 / $6, and one 8-GPU node at $8 / $32.
CAT = catalog(
    offer(),
    offer(itype="a2-1g", gpus=1, od="4", spot="1"),
    offer(itype="a2-1g-b", gpus=1, od="6", spot="2"),
)
FULL = onprem_nodes(2, 4, alloc=4)
BUSY = (running("r1", 4, "onprem-1", ends_in=3600), running("r2", 4, "onprem-2", ends_in=7200))


def key(itype: str, cap: CapacityType) -> OfferKey:
    return OfferKey("aws", "us-east-1", itype, cap)


def one_burst() -> ClusterSnapshot:
    return ClusterSnapshot(taken_ts=T0, jobs=(*BUSY, pending("b", 1, runtime=1000)), nodes=FULL)


def test_fallbacks_are_the_same_shapes_costlier_offers_cheapest_first() -> None:
    p = plan(one_burst(), policy(), CAT, Backoff(), T0)
    (up,) = p.scale_ups
    assert up.offer == key("a2-1g", SPOT)
    # The 8-GPU node is another shape: never a fallback for a 1-GPU node.
    assert up.fallbacks == (key("a2-1g-b", SPOT), key("a2-1g", OD), key("a2-1g-b", OD))
    listed = {a.offer: a.rejected_because for a in up.decision.alternatives if not a.chosen}
    assert all(listed[k] is Rejection.COSTLIER for k in up.fallbacks)


def test_a_fallback_past_the_global_cap_is_left_out() -> None:
    # Cap $3/h: after the $1 node, $2/h is left, so only the $2 spot offer (+$1/h) still fits.
    pol = policy(budgets={"global_usd_per_hour": 3})
    (up,) = plan(one_burst(), pol, CAT, Backoff(), T0).scale_ups
    assert up.offer == key("a2-1g", SPOT)
    assert up.fallbacks == (key("a2-1g-b", SPOT),)


def test_a_backed_off_offer_is_not_a_fallback() -> None:
    bo = Backoff().record_failure(key("a2-1g-b", SPOT), T0, 600.0, 3600.0)
    (up,) = plan(one_burst(), policy(), CAT, bo, T0).scale_ups
    assert key("a2-1g-b", SPOT) not in up.fallbacks
    assert up.fallbacks[0] == key("a2-1g", OD)


def test_the_rank_cache_is_reused_only_for_the_same_catalog_and_policy() -> None:
    pol = policy()
    ranks = RankCache(CAT, pol)
    first = plan(one_burst(), pol, CAT, Backoff(), T0, ranks=ranks)
    assert len(ranks) > 0
    again = plan(one_burst(), pol, CAT, Backoff(), T0, ranks=ranks)
    assert again.scale_ups == first.scale_ups
    other = policy()  # equal, but another object: a cache for it starts empty
    assert ranks.for_inputs(CAT, other) is not ranks
    assert len(ranks.for_inputs(CAT, other)) == 0
    assert ranks.for_inputs(CAT, pol) is ranks


def test_fallbacks_kept_across_passes_still_heed_this_passs_back_off_and_headroom() -> None:
    # One RankCache over three passes, as the simulator and the loop keep it. Cap $3/h: with
    # nothing running, $2/h is left after the $1 node, so the $2 spot offer (+$1/h) fits.
    pol = policy(budgets={"global_usd_per_hour": 3})
    ranks = RankCache(CAT, pol)
    (first,) = plan(one_burst(), pol, CAT, Backoff(), T0, ranks=ranks).scale_ups
    assert first.fallbacks == (key("a2-1g-b", SPOT),)
    # The next pass backs that offer off: nothing is left to fall back to.
    bo = Backoff().record_failure(key("a2-1g-b", SPOT), T0, 600.0, 3600.0)
    (backed,) = plan(one_burst(), pol, CAT, bo, T0, ranks=ranks).scale_ups
    assert backed.fallbacks == ()
    # Then $1.50/h already burns: $0.50/h is left after the $1 node, too little for +$1/h.
    spent = replace(one_burst(), spend=SpendState(burn_usd_hr=Decimal("1.5")))
    (tight,) = plan(spent, pol, CAT, Backoff(), T0, ranks=ranks).scale_ups
    assert tight.offer == key("a2-1g", SPOT)
    assert tight.fallbacks == ()
    (again,) = plan(one_burst(), pol, CAT, Backoff(), T0, ranks=ranks).scale_ups
    assert again.fallbacks == (key("a2-1g-b", SPOT),)


def test_the_fallback_memo_stays_bounded_as_the_headroom_moves() -> None:
    ranks = RankCache(CAT, policy())
    for k in range(MAX_FALLBACK_MEMO + 10):
        ranks.put_fallbacks(("pool", Decimal(k)), ())
    assert len(ranks._fallbacks) <= MAX_FALLBACK_MEMO
    assert ranks.fallbacks(("pool", Decimal(MAX_FALLBACK_MEMO + 9))) == ()
