"""Costs by slice: the part of a GPU a job held (its MIG devices' GRES type, or `shard`), from
its usage record through the accountant to a cost report, on SQLite and PostgreSQL. Values by
hand.

An 8-GPU instance at $56/h ($7 a GPU-hour) runs for one hour: job `mig` holds one 1g.10gb
device (1/7 of a GPU: $1.00), job `whole` one whole GPU ($7.00); the other $48.00 is idle. On
prem, job `shards` holds 3 shards of a GPU split in 4 for the hour at $1.20 a GPU-hour: $0.90.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from account_helpers import DAY, POLICY, T0, launch, terminate

from provisioner.account.ledger import Accountant
from provisioner.account.ledger_query import hourly, parse_ledger_query, select_rows
from provisioner.account.reports import ReportError, cost_report, parse_group_by
from provisioner.domain.records import JobUsage

D = Decimal
H = 3600.0


@pytest.fixture
def billed(store):
    launch(store, "i-8", at=T0, price="56", gpus=8, node="cloud-1")
    store.record_job_usage(
        [
            JobUsage("mig", "cloud-1", 0, T0, T0 + H, instance_id="i-8", team="vision",
                     part_gpus=1 / 7, gpu_part="1g.10gb"),
            JobUsage("whole", "cloud-1", 1, T0, T0 + H, instance_id="i-8", team="nlp"),
            JobUsage("shards", "gpu-01", 0, T0, T0 + H, team="speech", partition="onprem",
                     part_gpus=3 / 4, gpu_part="shard"),
        ]
    )  # fmt: skip
    terminate(store, "i-8", T0 + H)
    Accountant(store, POLICY).run(T0 + 2 * H)
    return store


def report(store, keys, a=T0, b=T0 + DAY, kinds=()):
    return {r.key: r.cost for r in cost_report(store, keys, a, b, kinds=kinds).rows}


@pytest.mark.parametrize("window", [(T0, T0 + DAY), (T0, T0 + 2 * H), (T0 - DAY, T0 + 2 * DAY)])
def test_a_report_by_slice_over_whole_and_partial_days(billed, window):
    assert report(billed, ("slice",), *window) == {
        ("",): D("55.000000"),  # the whole GPU's $7.00 and the idle $48.00
        ("1g.10gb",): D("1.000000"),
        ("shard",): D("0.900000"),
    }


def test_a_report_by_slice_and_kind_or_team(billed):
    assert report(billed, ("slice", "kind")) == {
        ("", "idle"): D("48.000000"),
        ("", "job"): D("7.000000"),
        ("1g.10gb", "job"): D("1.000000"),
        ("shard", "onprem"): D("0.900000"),
    }
    assert report(billed, ("slice", "team")) == {
        ("", "nlp"): D("7.000000"),
        ("", "vision"): D("48.000000"),  # idle: the team whose demand started the node
        ("1g.10gb", "vision"): D("1.000000"),
        ("shard", "speech"): D("0.900000"),
    }
    assert report(billed, ("slice",), kinds=("job",)) == {
        ("",): D("7.000000"),
        ("1g.10gb",): D("1.000000"),
    }


def test_the_rows_of_a_slice_and_its_hourly_chart(billed):
    q = parse_ledger_query({"slice": "1g.10gb"}, T0, T0 + DAY)
    rows = select_rows(billed, q)
    assert (rows.count, rows.cost) == (1, D("1.000000"))
    assert rows.rows[0]["job_id"] == "mig"
    whole = select_rows(billed, parse_ledger_query({"slice": ""}, T0, T0 + DAY))
    assert (whole.count, whole.cost) == (2, D("55.000000"))
    assert hourly(billed, "slice", T0, T0 + DAY) == {
        "": {T0: D("55.000000")},
        "1g.10gb": {T0: D("1.000000")},
        "shard": {T0: D("0.900000")},
    }
    assert hourly(billed, "day", T0, T0 + DAY, ("job",)) == {"total": {T0: D("8.000000")}}


def test_slice_is_a_group_key_and_the_error_lists_it():
    assert parse_group_by("Slice, team") == ("slice", "team")
    with pytest.raises(ReportError, match=r"'slices'; use any of .*, node, slice$"):
        parse_group_by("slices")
