"""Pool specs from the policy and the offer catalog (pure).

`spec_for_offer` builds the one node group a `ScaleUp` lands in; `pool_specs` lists every group the
policy allows (what `infra/__main__.py` previews and what an IaC review renders).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from provisioner.act.ports import PoolSpec
from provisioner.config.models import Policy, PoolPolicy
from provisioner.domain.errors import UnknownName
from provisioner.domain.offers import CapacityType, Offer, zone_in_region
from provisioner.plan.fallbacks import pool_capacities
from provisioner.plan.matching import OfferRequest, offer_fits

UserDataFn = Callable[[PoolSpec], str]


@dataclass(frozen=True, slots=True)
class NodeImages:
    """The boot image per cloud, optionally per region (`"aws/us-east-1"` wins over `"aws"`)."""

    images: Mapping[str, str] = field(default_factory=dict)

    def for_(self, cloud: str, region: str) -> str:
        image = self.images.get(f"{cloud}/{region}") or self.images.get(cloud)
        if not image:
            raise UnknownName(f"no node image configured for {cloud}/{region}")
        return image


def spec_for_offer(
    policy: Policy,
    pool: PoolPolicy,
    offer: Offer,
    capacity: CapacityType,
    *,
    images: NodeImages,
    decision_id: str = "",
    user_data: UserDataFn | None = None,
    project: str = "",
) -> PoolSpec:
    spec = PoolSpec(
        pool=pool.name,
        cloud=pool.cloud,
        region=offer.region,
        instance_type=offer.instance_type,
        capacity=capacity,
        gpu_model=offer.gpu_model,
        gpus=offer.whole_gpus,
        max_size=pool.max_nodes,
        image=images.for_(pool.cloud, offer.region),
        controller=policy.controller,
        team=pool.team,
        decision_id=decision_id,
        workload=pool.workload,
        project=project if pool.cloud == "gcp" else "",
        zones=tuple(z for z in pool.zones if zone_in_region(z, offer.region)),
        subnets=tuple(pool.subnets),
        security_groups=tuple(pool.security_groups),
        network=_gcp_path(pool.network, "global/networks/") or "global/networks/default",
        subnetwork=_gcp_path(pool.subnetwork, f"regions/{offer.region}/subnetworks/"),
        network_tags=tuple(pool.network_tags),
        disk_gb=pool.root_disk_gb,
        instance_profile=pool.instance_profile,
        service_account=pool.service_account,
        mig_profile=pool.mig.profile if pool.mig is not None else "",
        mig_per_gpu=pool.mig.per_gpu if pool.mig is not None else 0,
    )
    return replace(spec, user_data=user_data(spec)) if user_data is not None else spec


def _gcp_path(name: str, prefix: str) -> str:
    """A GCE resource as the API takes it: a bare name under `prefix`, else as written (a
    partial path or a full URL, e.g. another project's shared VPC)."""
    return name if not name or "/" in name else prefix + name


def pool_specs(
    policy: Policy,
    offers: Iterable[Offer],
    *,
    images: NodeImages,
    decision_id: str = "iac",
    user_data: UserDataFn | None = None,
    project: str = "",
    pools: Iterable[str] = (),
) -> list[PoolSpec]:
    """Every (pool, region, instance type, capacity) group the policy allows, in a stable order."""
    wanted = set(pools)
    catalog = list(offers)
    out: list[PoolSpec] = []
    for pool in policy.pools:
        if wanted and pool.name not in wanted:
            continue
        req = OfferRequest(
            gpus_per_node=1,
            gpu_model=pool.gpu_model,
            min_gpu_mem_gb=pool.min_gpu_mem_gb,
            clouds=(pool.cloud,),
            regions=tuple(pool.regions),
            instance_types=tuple(pool.instance_types),
        )
        for cap in pool_capacities(pool):
            for offer in sorted(catalog, key=lambda o: (o.region, o.instance_type)):
                if offer_fits(offer, req, cap):
                    out.append(
                        spec_for_offer(
                            policy,
                            pool,
                            offer,
                            cap,
                            images=images,
                            decision_id=decision_id,
                            user_data=user_data,
                            project=project,
                        )
                    )
    return out
