"""A memo of the planner's offer rankings, held by the caller across plan() calls."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from provisioner.config.models import Policy
from provisioner.plan.catalog import Catalog

if TYPE_CHECKING:
    from provisioner.plan.ranking import Candidate


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

    def for_inputs(self, catalog: Catalog, policy: Policy) -> RankCache:
        """This cache if it was built for these objects, else a new, empty one."""
        if catalog is self.catalog and policy is self.policy:
            return self
        return RankCache(catalog, policy)

    def get(self, key: Hashable) -> list[Candidate] | None:
        return self._ranked.get(key)

    def put(self, key: Hashable, ranked: list[Candidate]) -> None:
        self._ranked[key] = ranked

    def __len__(self) -> int:
        return len(self._ranked)
