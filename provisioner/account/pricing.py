"""Prices. A cloud instance is priced once, at launch, from the offer it was launched on; the
stored price is what it is billed at for its whole life, whatever the catalog says later."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from provisioner.config.models import Policy
from provisioner.domain.errors import NotKnown
from provisioner.domain.offers import Offer, OfferKey


class PriceUnknown(NotKnown):
    pass


def price_at_launch(offers: Iterable[Offer], key: OfferKey) -> Decimal:
    """$/h of the instance type `key` names, at the capacity it names (on-demand or spot)."""
    for o in offers:
        if (o.cloud, o.region, o.instance_type) == (key.cloud, key.region, key.instance_type):
            price = o.price(key.capacity)
            if price is None:
                raise PriceUnknown(f"{key}: the catalog has no {key.capacity} price")
            return price
    raise PriceUnknown(f"{key}: not in the catalog")


def onprem_usd_per_gpu_hour(policy: Policy) -> Decimal:
    return policy.onprem.amortized_usd_per_gpu_hour


def energy_usd_per_kwh(policy: Policy) -> Decimal:
    return policy.onprem.energy_usd_per_kwh
