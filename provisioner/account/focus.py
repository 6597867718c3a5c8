"""FOCUS 1.2 export of the ledger, as CSV streamed row by row (flat memory at any size).

One FOCUS row per ledger row. Columns: the FOCUS 1.2 mandatory ones, the conditional ones the
1.0 validator expects, FOCUS 1.3's ServiceProviderName / HostProviderName, and custom `x_`
columns (job, team, partition, decision, ...). With `compat_1_0` (the default) the export also
carries the column names the `focus-validator` 1.0.0 rule set still uses (Provider, Publisher,
InvoiceIssuer, ResourceID, ChargeType) with the same values, so that validator passes.

Decimal columns are written with six decimals (exact micro-dollars), times as ISO 8601 UTC.

InvoiceId (recommended by FOCUS 1.2) is present and null: these rows are the controller's own
ledger, not lines of an issued or provisional invoice, and FOCUS 1.2 says InvoiceId MUST be null
then. focus-validator 2.2.1's rule model (model-1.2.0.1.json) checks both halves of that
nullability rule with no condition: InvoiceId-C-004-C (MUST be null) and InvoiceId-C-005-C (MUST
NOT be null) apply to every row, so any export with the column fails one of them (and without
the column seven InvoiceId rules fail). Their parent, InvoiceId-C-003-C (C-004 OR C-005), passes.
The one failure left, C-005, is that contradiction; the tests assert it is the only one.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from provisioner.account.budgets import month_bounds
from provisioner.account.csv_safe import safe_row
from provisioner.ports.store import Ledger

FOCUS_COLUMNS: tuple[str, ...] = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ServiceProviderName",
    "HostProviderName",
    "AvailabilityZone",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceSubcategory",
    "ServiceName",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
    "x_JobId",
    "x_Team",
    "x_Partition",
    "x_DecisionId",
    "x_Account",
    "x_User",
    "x_Pool",
    "x_CostKind",
    "x_CapacityType",
    "x_InstanceType",
)
COMPAT_1_0_COLUMNS: tuple[str, ...] = (
    "Provider",
    "Publisher",
    "InvoiceIssuer",
    "ResourceID",
    "ChargeType",
)

_PROVIDERS = {
    "aws": ("AWS", "Amazon EC2"),
    "gcp": ("Google Cloud", "Compute Engine"),
    "": ("On-premises", "On-premises GPU cluster"),
}
_PRICING_CATEGORY = {"on-demand": "Standard", "spot": "Dynamic"}
_KIND_TEXT = {
    "job": "GPU time of job {job} on {what}",
    "idle": "Idle GPU time on {what}",
    "unbound": "Cloud instance time before it joined Slurm on {what}",
    "orphan": "Orphan cloud instance time (found by its tags, no record) on {what}",
    "onprem": "On-premises GPU time of job {job} (amortised) on {what}",
    "energy": "GPU energy on {what}",
}


@dataclass(frozen=True, slots=True)
class FocusOptions:
    """`billing_accounts` maps a cloud ('aws', 'gcp', '' for on-prem) to the billing account
    id shown; by default it is '<controller>:<cloud>'."""

    controller: str = "burst-ctl"
    billing_accounts: Mapping[str, str] = field(default_factory=dict)
    compat_1_0: bool = True

    @property
    def columns(self) -> tuple[str, ...]:
        return FOCUS_COLUMNS + (COMPAT_1_0_COLUMNS if self.compat_1_0 else ())


def _iso(ts: float) -> str:
    whole = int(ts)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    frac = ts - whole
    if frac <= 0:
        return base + "Z"
    return f"{base}.{min(999, round(frac * 1000)):03d}Z"


def _dec(micros: int) -> str:
    sign = "-" if micros < 0 else ""
    m = abs(int(micros))
    return f"{sign}{m // 1_000_000}.{m % 1_000_000:06d}"


class _Period:
    """Billing-period strings per day, cached (one month has few days)."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, str]] = {}

    def of(self, day: str, ts: float) -> tuple[str, str]:
        hit = self._cache.get(day)
        if hit is None:
            a, b = month_bounds(ts)
            hit = (_iso(a), _iso(b))
            if len(self._cache) > 1024:
                self._cache.clear()
            self._cache[day] = hit
        return hit


def _provider(cloud: str) -> tuple[str, str]:
    return _PROVIDERS.get(cloud, (cloud.upper(), f"{cloud.upper()} compute"))


def focus_row(r: Any, opts: FocusOptions, periods: _Period) -> list[str]:
    """One ledger row (a tuple of `ports.store.EXPORT_COLUMNS`) as FOCUS values, in
    `opts.columns` order."""
    (
        start_ts,
        end_ts,
        day,
        kind,
        cloud,
        region,
        pool,
        instance_id,
        node_name,
        offer,
        instance_type,
        capacity,
        job_id,
        team,
        account,
        user,
        partition,
        decision_id,
        quantity,
        unit,
        unit_price_micros,
        cost_micros,
    ) = r
    provider, service = _provider(cloud)
    cost = _dec(cost_micros)
    price = _dec(unit_price_micros)
    qty = f"{quantity:.6f}"
    bp0, bp1 = periods.of(day, start_ts)
    resource_id = instance_id or node_name
    resource_name = node_name or instance_id
    what = f"{instance_type} ({capacity}) in {region}" if cloud else (node_name or pool)
    description = _KIND_TEXT.get(kind, "{what}").format(job=job_id, what=what)
    account_id = opts.billing_accounts.get(cloud) or f"{opts.controller}:{cloud or 'onprem'}"
    sku_price = offer or f"onprem/{unit}"
    tags = json.dumps(
        {
            k: v
            for k, v in (
                ("team", team),
                ("account", account),
                ("user", user),
                ("partition", partition),
                ("pool", pool),
                ("job", job_id),
                ("decision", decision_id),
                ("kind", kind),
            )
            if v
        },
        separators=(",", ":"),
        sort_keys=True,
    )
    row = [
        cost,  # BilledCost
        account_id,  # BillingAccountId
        account_id,  # BillingAccountName
        "USD",  # BillingCurrency
        bp0,  # BillingPeriodStart
        bp1,  # BillingPeriodEnd
        "Usage",  # ChargeCategory
        "",  # ChargeClass
        description,  # ChargeDescription
        "Usage-Based",  # ChargeFrequency
        _iso(start_ts),  # ChargePeriodStart
        _iso(end_ts),  # ChargePeriodEnd
        "",  # CommitmentDiscountCategory
        "",  # CommitmentDiscountId
        "",  # CommitmentDiscountName
        "",  # CommitmentDiscountStatus
        "",  # CommitmentDiscountType
        qty,  # ConsumedQuantity
        unit,  # ConsumedUnit
        cost,  # ContractedCost
        price,  # ContractedUnitPrice
        cost,  # EffectiveCost
        "",  # InvoiceId: null, no invoice is issued for these charges (see INVOICE_ID_NOTE)
        provider,  # InvoiceIssuerName
        cost,  # ListCost
        price,  # ListUnitPrice
        _PRICING_CATEGORY.get(capacity, "Other"),  # PricingCategory
        qty,  # PricingQuantity
        unit,  # PricingUnit
        provider,  # ProviderName
        provider,  # PublisherName
        provider,  # ServiceProviderName
        provider,  # HostProviderName
        "",  # AvailabilityZone
        region,  # RegionId
        region,  # RegionName
        resource_id,  # ResourceId
        resource_name,  # ResourceName
        "Virtual Machine" if cloud else "GPU Server",  # ResourceType
        "Compute",  # ServiceCategory
        "Virtual Machines" if cloud else "Other (Compute)",  # ServiceSubcategory
        service,  # ServiceName
        instance_type or f"onprem-{unit}",  # SkuId
        sku_price,  # SkuPriceId
        team,  # SubAccountId
        team,  # SubAccountName
        tags,  # Tags
        job_id,  # x_JobId
        team,  # x_Team
        partition,  # x_Partition
        decision_id,  # x_DecisionId
        account,  # x_Account
        user,  # x_User
        pool,  # x_Pool
        kind,  # x_CostKind
        capacity,  # x_CapacityType
        instance_type,  # x_InstanceType
    ]
    if opts.compat_1_0:
        row += [provider, provider, provider, resource_id, "Usage"]
    return row


def iter_focus_csv(
    store: Ledger,
    from_ts: float | None = None,
    to_ts: float | None = None,
    opts: FocusOptions | None = None,
    *,
    chunk_rows: int = 2000,
) -> Iterator[str]:
    """The export as CSV text chunks: the header, then `chunk_rows` rows at a time. Rows are
    read from the database in batches, so memory stays flat whatever the ledger's size."""
    opts = opts or FocusOptions()
    periods = _Period()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(opts.columns)
    yield buf.getvalue()
    for part in store.ledger_export(from_ts, to_ts, chunk_rows=chunk_rows):
        buf.seek(0)
        buf.truncate()
        writer.writerows(safe_row(focus_row(r, opts, periods)) for r in part)
        yield buf.getvalue()
