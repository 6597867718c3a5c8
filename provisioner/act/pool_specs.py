"""The lookups a scale-up needs to become node group specs: the policy's pools, the catalog's
offers, the boot images and the node bootstrap. Copied once, read by the cloud actuator and by
the reconcile steps that rebuild a spec (recovery asks the group whether a resize happened)."""

from __future__ import annotations

from provisioner.act.ports import PoolSpec
from provisioner.act.specs import NodeImages, UserDataFn, spec_for_offer
from provisioner.config.models import Policy, PoolPolicy
from provisioner.domain.offers import Offer, OfferKey
from provisioner.plan.catalog import Catalog


class OfferSpecs:
    def __init__(
        self,
        policy: Policy,
        catalog: Catalog,
        *,
        images: NodeImages | None = None,
        user_data: UserDataFn | None = None,
        project: str = "",
    ) -> None:
        self.policy = policy
        self.images = images or NodeImages()
        self.user_data = user_data
        self.project = project
        self.catalog = catalog

    def pool(self, name: str) -> PoolPolicy | None:
        try:
            return self.policy.pool(name)
        except KeyError:
            return None

    @property
    def offers_by_type(self) -> dict[tuple[str, str, str], Offer]:
        """(cloud, region, instance type) -> the catalog's offer."""
        return self.catalog.offers_by_type

    def offer(self, key: OfferKey) -> Offer | None:
        return self.catalog.get(key)

    def images_for(self, pool: PoolPolicy) -> NodeImages:
        if pool.image:
            return NodeImages({pool.cloud: pool.image})
        return self.images

    def spec(self, pool: PoolPolicy, key: OfferKey, decision: str) -> PoolSpec | None:
        """The node group for `key` in `pool`; None for an offer not in the catalog. Raises
        KeyError when no boot image is configured for the offer's region."""
        offer = self.offer(key)
        if offer is None:
            return None
        return spec_for_offer(
            self.policy,
            pool,
            offer,
            key.capacity,
            images=self.images_for(pool),
            decision_id=decision,
            user_data=self.user_data,
            project=self.project,
        )
