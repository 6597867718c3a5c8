"""FOCUS export: the columns, the values, streaming, and focus-validator 1.0 passes on it."""

from __future__ import annotations

import csv
import io
import subprocess
from decimal import Decimal

from account_helpers import DAY, POLICY, T0, launch, terminate
from focus_check import (
    require_validator,
    require_validator_1_2,
    validate_focus,
    validate_focus_1_2,
    validator_site,
)

from provisioner.account.focus import (
    COMPAT_1_0_COLUMNS,
    FOCUS_COLUMNS,
    FocusOptions,
    iter_focus_csv,
)
from provisioner.account.ledger import Accountant
from provisioner.domain.offers import CapacityType
from provisioner.domain.records import JobUsage

MANDATORY_1_2 = [
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
]


def populate(store) -> None:
    launch(store, "i-od", at=T0 - 1800, price="10", gpus=4, node="cloud-1")
    launch(
        store,
        "i-spot",
        at=T0 + 100,
        price="3.5",
        gpus=8,
        capacity=CapacityType.SPOT,
        team="nlp",
        pool="aws-spot",
        node="cloud-2",
    )
    store.record_job_usage(
        [
            JobUsage(
                "101",
                "cloud-1",
                2,
                T0 - 1700,
                T0 + 1200,
                instance_id="i-od",
                account="acct-v",
                user="ann",
                partition="cloud",
            ),
            JobUsage(
                "102",
                "cloud-2",
                8,
                T0 + 200,
                T0 + 900,
                instance_id="i-spot",
                account="acct-n",
                user="bob",
                partition="cloud",
            ),
            JobUsage(
                "103", "gpu-01", 4, T0, T0 + 5000, account="acct-v", user="cy", partition="onprem"
            ),
        ]
    )
    terminate(store, "i-od", T0 + 3600)
    terminate(store, "i-spot", T0 + 1000)
    acct = Accountant(store, POLICY)
    acct.run(T0 + DAY)
    acct.bill_energy("gpu-01", T0, T0 + 5000, Decimal("3.2"), node_gpus=8)


def export(store, **kw) -> str:
    return "".join(iter_focus_csv(store, **kw))


def test_columns_and_values(store):
    populate(store)
    text = export(store)
    rows = list(csv.DictReader(io.StringIO(text)))
    header = text.splitlines()[0].split(",")
    assert set(MANDATORY_1_2) <= set(header)
    assert {
        "ServiceProviderName",
        "HostProviderName",
        "x_JobId",
        "x_Team",
        "x_Partition",
        "x_DecisionId",
    } <= set(header)
    assert header == list(FOCUS_COLUMNS + COMPAT_1_0_COLUMNS)
    assert all(
        c.startswith("x_") for c in header if c not in FOCUS_COLUMNS[:47] + COMPAT_1_0_COLUMNS
    )
    # No invoice is issued for these charges: InvoiceId is present and null (FOCUS 1.2).
    assert "InvoiceId" in header and all(r["InvoiceId"] == "" for r in rows)
    total = sum(Decimal(r["BilledCost"]) for r in rows)
    assert total == store.ledger_total()
    job = next(r for r in rows if r["x_JobId"] == "101")
    assert job["ProviderName"] == job["ServiceProviderName"] == "AWS"
    assert job["ServiceName"] == "Amazon EC2" and job["RegionId"] == "us-east-1"
    assert job["ResourceId"] == "i-od" and job["x_Team"] == "vision"
    assert job["x_DecisionId"] == "d-i-od" and job["x_Partition"] == "cloud"
    assert job["PricingCategory"] == "Standard" and job["PricingUnit"] == "GPU-Hours"
    assert (
        job["ChargePeriodStart"].endswith("Z")
        and job["BillingPeriodStart"] == "2025-12-01T00:00:00Z"
    )
    spot = next(r for r in rows if r["x_JobId"] == "102")
    assert spot["PricingCategory"] == "Dynamic"
    onprem = next(r for r in rows if r["x_JobId"] == "103" and r["x_CostKind"] == "onprem")
    assert onprem["ProviderName"] == "On-premises" and onprem["RegionId"] == ""
    assert {r["x_CostKind"] for r in rows} == {"job", "idle", "onprem", "energy"}


def test_window_and_no_compat_columns(store):
    populate(store)
    rows = list(csv.DictReader(io.StringIO(export(store, from_ts=T0, to_ts=T0 + 600))))
    assert rows and all("2026-01-01T00:0" in r["ChargePeriodStart"] for r in rows)
    plain = export(store, opts=FocusOptions(compat_1_0=False)).splitlines()[0].split(",")
    assert not set(COMPAT_1_0_COLUMNS) & set(plain)


def test_export_streams_in_chunks(store):
    populate(store)
    chunks = list(iter_focus_csv(store, chunk_rows=3))
    n = len(list(csv.reader(io.StringIO("".join(chunks))))) - 1
    assert len(chunks) == 1 + -(-n // 3)


def test_focus_validator_1_0_passes(store, tmp_path):
    exe = require_validator()
    populate(store)
    data = tmp_path / "focus.csv"
    data.write_text(export(store))
    site = validator_site(exe)
    suites = validate_focus(exe, data, tmp_path / "report.xml", site)
    assert int(suites.get("tests", "0")) > 100
    console = subprocess.run(
        [exe, "--data-file", str(data), "--validate-version", "1.0"],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Validation succeeded." in console.stdout, console.stdout


def test_focus_validator_2_2_1_passes_the_focus_1_2_rules(store, tmp_path):
    """focus-validator 2.2.1 (FOCUS 1.2 rule model): nothing fails but the one contradictory
    rule pair the model carries (see `provisioner.account.focus`, InvoiceId)."""
    exe = require_validator_1_2()
    populate(store)
    data = tmp_path / "focus.csv"
    data.write_text(export(store, opts=FocusOptions(compat_1_0=False)))
    counts = validate_focus_1_2(exe, data, tmp_path / "report12.xml")
    assert counts["tests"] == 578 and counts["passed"] >= 130
