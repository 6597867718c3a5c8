"""A memo of what the planner derives from its catalog and policy alone (offer rankings,
fallback lists, job classes, on-prem facts), held by the caller across plan() calls."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from provisioner.config.models import Policy
from provisioner.plan.catalog import Catalog

if TYPE_CHECKING:
    from provisioner.domain.offers import OfferKey
    from provisioner.plan.planning_pass import JobClass
    from provisioner.plan.ranking import Candidate

# Kept fallback lists, past which the memo starts afresh: a controller keeps one cache for days,
# and each $/h headroom it plans under is a key of its own.
MAX_FALLBACK_MEMO = 4096


class RankCache:
    """Offer rankings for one catalog and one policy, kept across plan() calls: a ranking
    depends only on those two and the job's shape, and a simulator plans at every event.

    The caller that plans many times holds one (the loop, the simulator) and passes it to
    `plan()`; `for_inputs` hands back a fresh cache when the catalog or policy changed, so a
    stale ranking is never used."""

    def __init__(self, catalog: Catalog, policy: Policy) -> None:
        self.catalog = catalog
        self.policy = policy
        self._ranked: dict[Hashable, list[Candidate]] = {}
        # A scale-up's fallback offers, before back-off, where no team budget bounds them:
        # they then depend only on the catalog, the policy, the offers the decision lists and
        # the $/h headroom (see PlanningPass.fallbacks).
        self._fallbacks: dict[Hashable, tuple[OfferKey, ...]] = {}
        # What the policy says of a (partition, qos): the same for every pass.
        self.job_classes: dict[tuple[str, str], JobClass] = {}
        # The on-prem GPU model (lower case), the models that count as it, and the on-prem
        # partitions: every pass reads them.
        self.onprem_model = policy.onprem.gpu_model.lower()
        self.onprem_models = frozenset(
            {self.onprem_model, *(m.lower() for m in policy.onprem.equivalent_gpu_models)}
        )
        self.onprem_parts = frozenset(policy.onprem.partitions)

    def for_inputs(self, catalog: Catalog, policy: Policy) -> RankCache:
        """This cache if it was built for these objects, else a new, empty one."""
        if catalog is self.catalog and policy is self.policy:
            return self
        return RankCache(catalog, policy)

    def get(self, key: Hashable) -> list[Candidate] | None:
        return self._ranked.get(key)

    def put(self, key: Hashable, ranked: list[Candidate]) -> None:
        self._ranked[key] = ranked

    def fallbacks(self, key: Hashable) -> tuple[OfferKey, ...] | None:
        return self._fallbacks.get(key)

    def put_fallbacks(self, key: Hashable, offers: tuple[OfferKey, ...]) -> None:
        if len(self._fallbacks) >= MAX_FALLBACK_MEMO:  # the loop's headroom moves with its burn
            self._fallbacks.clear()
        self._fallbacks[key] = offers

    def __len__(self) -> int:
        return len(self._ranked)
