"""The `Ledger` contract (`provisioner.ports.store.Ledger`): job usage, ledger rows, the report
queries and the billing watermarks, on the in-memory ledger, SQLite and PostgreSQL alike (see
test_store_contract.py for the implementations). Every expected value is added up by hand."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from test_store_contract import DAY, IMPLEMENTATIONS, SPOT, T0, H, Impl, failing_after, open_impl

from provisioner.domain.errors import InvalidArgument
from provisioner.domain.records import (
    CLOUD_KINDS,
    BillingMark,
    JobUsage,
    LedgerEntry,
    LedgerKind,
)
from provisioner.ports.store import EXPORT_COLUMNS, Ledger, LedgerFilter
from provisioner.store import ConcurrentUpdate, NotFound, StoreError


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def impl(db_backend: str, request: pytest.FixtureRequest) -> Iterator[Impl]:
    with open_impl(db_backend, request) as it:
        yield it


@pytest.fixture
def ledger(impl: Impl) -> Ledger:
    return impl.ledger


# ----------------------------------------------------------------------------- Ledger: rows


def entry(
    start: float,
    cost: str,
    kind: LedgerKind | str = LedgerKind.JOB,
    *,
    length: float = 60.0,
    **kw: Any,
) -> LedgerEntry:
    return LedgerEntry(start, start + length, kind, Decimal(cost), **kw)  # type: ignore[arg-type]


def test_ledger_rows_read_back_in_start_then_insertion_order(ledger: Ledger) -> None:
    a = entry(T0 + 100, "1", instance_id="i-1", job_id="j-1", team="vision", gpus=4)
    b = entry(T0 + 50, "2", LedgerKind.IDLE, instance_id="i-1")
    c = entry(T0 + 100, "3", instance_id="i-2", job_id="j-1")
    assert ledger.add_ledger([a, b]) == 2
    assert ledger.add_ledger(iter([c])) == 1
    assert ledger.ledger_entries() == [b, a, c]
    assert ledger.ledger_entries(instance_id="i-1") == [b, a]
    assert ledger.ledger_entries(job_id="j-1") == [a, c]
    assert ledger.ledger_entries(instance_id="i-2", job_id="j-1") == [c]
    assert ledger.ledger_entries(instance_id="i-3") == []
    assert ledger.add_ledger([]) == 0


def test_job_costs_sum_each_jobs_rows_exactly(ledger: Ledger) -> None:
    ledger.add_ledger(
        [
            entry(T0, "0.100001", job_id="j-1", instance_id="i-1"),
            entry(T0 + 60, "0.200002", LedgerKind.ENERGY, job_id="j-1"),
            entry(T0 + 120, "1.5", job_id="j-2"),
            entry(T0 + 180, "9", LedgerKind.IDLE, instance_id="i-1"),  # no job
        ]
    )
    assert ledger.job_costs(["j-1", "j-2", "j-3", ""]) == {
        "j-1": Decimal("0.300003"),
        "j-2": Decimal("1.5"),
    }
    assert ledger.job_costs([]) == {}


def test_a_ledger_row_keeps_every_field(ledger: Ledger) -> None:
    e = LedgerEntry(
        start_ts=T0 + 0.25,
        end_ts=T0 + H,
        kind=LedgerKind.JOB,
        cost=Decimal("1.5"),
        cloud="aws",
        region="us-east-1",
        pool="aws-a100",
        instance_id="i-1",
        node_name="cloud-1",
        offer=str(SPOT),
        instance_type="p4d.24xlarge",
        capacity="spot",
        job_id="42",
        team="vision",
        account="acct-v",
        user="alice",
        partition="gpu",
        decision_id="d-1",
        gpus=4,
        quantity=3.5,
        unit="GPU-hour",
        unit_price=Decimal("0.75"),
        gpu_part="1g.10gb",
    )
    ledger.add_ledger([e])
    (got,) = ledger.ledger_entries()
    assert got == e
    assert got.kind is LedgerKind.JOB


def test_the_kind_may_be_given_as_text_and_reads_back_as_the_enum(ledger: Ledger) -> None:
    ledger.add_ledger([entry(T0, "1", "energy")])
    (got,) = ledger.ledger_entries()
    assert got.kind is LedgerKind.ENERGY


def test_amounts_are_kept_to_the_micro_dollar(ledger: Ledger) -> None:
    # Rounded half to even at the sixth decimal.
    ledger.add_ledger(
        [
            entry(T0, "0.1234564", unit_price=Decimal("0.0000015")),
            entry(T0 + 60, "0.1234566", unit_price=Decimal("0.0000025")),
            entry(T0 + 120, "-0.25"),  # a credit is a negative row
        ]
    )
    got = ledger.ledger_entries()
    assert [g.cost for g in got] == [Decimal("0.123456"), Decimal("0.123457"), Decimal("-0.25")]
    assert [g.unit_price for g in got] == [Decimal("0.000002"), Decimal("0.000002"), 0]
    assert str(got[0].cost) == "0.123456"
    # 0.123456 + 0.123457 - 0.25 = -0.003087
    assert ledger.ledger_total() == Decimal("-0.003087")


def test_rows_up_to_the_bounds_are_kept(ledger: Ledger) -> None:
    at_midnight = entry(T0 + DAY - 60, "1", length=60.0)  # ends on the midnight, not past it
    instant = entry(T0 + 5, "0", length=0.0)
    largest = entry(T0 + 10, "10000000", unit_price=Decimal("-10000000"))  # $10M, both ways
    assert ledger.add_ledger([at_midnight, instant, largest]) == 3
    assert ledger.ledger_total() == Decimal("10000001")


BAD_ENTRIES = {
    "ends before it starts": entry(T0 + 100, "1", length=-1.0),
    "straddles a midnight": entry(T0 + DAY - 60, "1", length=61.0),
    "costs over $10M": entry(T0, "10000000.000001"),
    "credits over $10M": entry(T0, "-10000000.000001"),
    "unit price over $10M": entry(T0, "1", unit_price=Decimal("10000000.000001")),
}


@pytest.mark.parametrize("bad", BAD_ENTRIES.values(), ids=BAD_ENTRIES.keys())
def test_a_bad_row_aborts_the_whole_batch(ledger: Ledger, bad: LedgerEntry) -> None:
    kept = entry(T0 - DAY, "5")
    ledger.add_ledger([kept])
    with pytest.raises(StoreError):
        ledger.add_ledger([entry(T0, "1"), entry(T0 + 60, "2"), bad])
    assert ledger.ledger_entries() == [kept]
    assert ledger.ledger_total() == Decimal("5")
    assert ledger.grouped_costs(["day"], T0 - DAY, T0 + 2 * DAY) == {
        ("2025-12-31",): (Decimal("5"), 1)
    }
    assert sum(len(chunk) for chunk in ledger.ledger_export()) == 1


def test_a_row_over_the_bound_names_the_bound(ledger: Ledger) -> None:
    with pytest.raises(StoreError, match=r"over the \$10,000,000"):
        ledger.add_ledger([entry(T0, "92233720368547.758", "energy")])


def test_ledger_total_over_a_half_open_window_of_start_times(ledger: Ledger) -> None:
    assert ledger.ledger_total() == 0
    ledger.add_ledger([entry(T0, "1.25"), entry(T0 + 60, "2.5"), entry(T0 + 120, "4")])
    assert ledger.ledger_total() == Decimal("7.75")
    assert ledger.ledger_total(from_ts=T0 + 60) == Decimal("6.5")  # 2.5 + 4
    assert ledger.ledger_total(to_ts=T0 + 60) == Decimal("1.25")  # the row at `to` is out
    assert ledger.ledger_total(T0 + 1, T0 + 120) == Decimal("2.5")  # started inside only
    assert ledger.ledger_total(T0 + 200, T0 + 300) == 0
    assert str(ledger.ledger_total(T0 + 200, T0 + 300)) == "0.000000"


# ----------------------------------------------------------------------------- Ledger: reports


def three_days(ledger: Ledger) -> None:
    """Six rows over four UTC days (Jan 1 to 4, 2026); the report tests add them up by hand."""
    aws: dict[str, Any] = {"cloud": "aws", "region": "us-east-1", "pool": "aws-a100"}
    gcp: dict[str, Any] = {"cloud": "gcp", "region": "us-central1", "pool": "gcp-a100"}
    ledger.add_ledger(
        [
            # Jan 1
            entry(T0 + H, "1.50", team="vision", account="acct-v", partition="gpu", **aws),
            # Jan 2
            entry(T0 + DAY + 100, "2.25", LedgerKind.IDLE, team="vision", **aws),
            entry(T0 + DAY + 200, "4.00", team="nlp", account="acct-n", partition="gpu", **gcp),
            entry(T0 + DAY + 300, "5.00", LedgerKind.ONPREM, team="vision", partition="gpu"),
            # Jan 3
            entry(T0 + 2 * DAY + 50, "0.75", team="nlp", account="acct-n", **gcp),
            # Jan 4
            entry(T0 + 3 * DAY + 10, "10.00", team="vision", **aws),
        ]
    )


# A window over a partial Jan 1 (from 00:30), the whole of Jan 2 and a partial Jan 3 (to
# 01:00): the first five rows, $13.50 in all.
FROM, TO = T0 + 1800, T0 + 2 * DAY + H


def test_grouped_costs_per_day_over_partial_and_whole_days(ledger: Ledger) -> None:
    three_days(ledger)
    assert ledger.grouped_costs(["day"], FROM, TO) == {
        ("2026-01-01",): (Decimal("1.50"), 1),
        ("2026-01-02",): (Decimal("11.25"), 3),  # 2.25 + 4.00 + 5.00
        ("2026-01-03",): (Decimal("0.75"), 1),
    }
    assert ledger.grouped_costs([], FROM, TO) == {(): (Decimal("13.50"), 5)}
    # From after the Jan 1 row's start: it is out, though its day is in the window.
    assert ledger.grouped_costs([], T0 + H + 1, TO) == {(): (Decimal("12.00"), 4)}
    # Whole days only: Jan 2 and 3.
    assert ledger.grouped_costs([], T0 + DAY, T0 + 3 * DAY) == {(): (Decimal("12.00"), 4)}
    # Within one day.
    assert ledger.grouped_costs([], T0 + DAY + 150, T0 + DAY + 250) == {(): (Decimal("4"), 1)}
    assert ledger.grouped_costs(["day"], T0 + 4 * DAY, T0 + 5 * DAY) == {}
    assert ledger.grouped_costs([], T0 + 4 * DAY, T0 + 5 * DAY) == {}


def test_grouped_costs_per_node_over_whole_and_partial_days(ledger: Ledger) -> None:
    """No rollup keeps the node, so the whole day inside the window must be read from the
    ledger as well: the sums below span a partial, a whole and a partial day."""
    ledger.add_ledger(
        [
            entry(T0 + H, "1.50", node_name="aws-a100-0"),  # Jan 1
            entry(T0 + DAY + 100, "2.25", LedgerKind.IDLE, node_name="aws-a100-0"),  # Jan 2
            entry(T0 + DAY + 200, "4.00", node_name="gcp-a100-1"),  # Jan 2
            entry(T0 + DAY + 300, "5.00", LedgerKind.ONPREM, node_name="dgx-01"),  # Jan 2
            entry(T0 + 2 * DAY + 50, "0.75", node_name="gcp-a100-1"),  # Jan 3
            entry(T0 + 3 * DAY + 10, "10.00", node_name="aws-a100-0"),  # Jan 4: outside
        ]
    )
    assert ledger.grouped_costs(["node_name"], FROM, TO) == {
        ("aws-a100-0",): (Decimal("3.75"), 2),  # 1.50 + 2.25
        ("gcp-a100-1",): (Decimal("4.75"), 2),  # 4.00 + 0.75
        ("dgx-01",): (Decimal("5.00"), 1),
    }
    assert ledger.grouped_costs(["day", "node_name"], T0 + DAY, T0 + 2 * DAY, ["job"]) == {
        ("2026-01-02", "gcp-a100-1"): (Decimal("4.00"), 1),
    }


def test_grouped_costs_per_gpu_part_over_whole_and_partial_days(ledger: Ledger) -> None:
    """No rollup keeps the part of a GPU a job held either: read from the ledger, a whole day
    inside the window included. Rows of no part (whole GPUs, idle) group under ""."""
    ledger.add_ledger(
        [
            entry(T0 + H, "1.00", gpu_part="1g.10gb"),  # Jan 1
            entry(T0 + DAY + 100, "7.00"),  # Jan 2: a whole GPU
            entry(T0 + DAY + 200, "48.00", LedgerKind.IDLE),  # Jan 2
            entry(T0 + DAY + 300, "0.90", LedgerKind.ONPREM, gpu_part="shard"),  # Jan 2
            entry(T0 + 2 * DAY + 50, "3.00", gpu_part="1g.10gb"),  # Jan 3
            entry(T0 + 3 * DAY + 10, "10.00", gpu_part="1g.10gb"),  # Jan 4: outside
        ]
    )
    assert ledger.grouped_costs(["gpu_part"], FROM, TO) == {
        ("1g.10gb",): (Decimal("4.00"), 2),  # 1.00 + 3.00
        ("",): (Decimal("55.00"), 2),  # 7.00 + 48.00
        ("shard",): (Decimal("0.90"), 1),
    }
    assert ledger.grouped_costs(["day", "gpu_part"], T0 + DAY, T0 + 2 * DAY, ["job"]) == {
        ("2026-01-02", ""): (Decimal("7.00"), 1),
    }
    page = ledger.ledger_page(LedgerFilter(FROM, TO, (("gpu_part", "1g.10gb"),)))
    assert (page.count, page.cost_micros) == (2, 4_000_000)


def test_a_ledger_page_filters_and_sums_in_the_store(ledger: Ledger) -> None:
    """The rows behind a figure: equality on any filter column, kinds, unit and instances;
    every match counts towards the figures, a page of them is returned, in start order."""
    rows = [
        entry(T0 + H, "1.50", node_name="n-1", instance_id="i-1", team="vision", unit="GPU-Hours",
              quantity=2.0),
        entry(T0 + H + 10, "2.25", LedgerKind.IDLE, node_name="n-1", instance_id="i-1",
              team="vision", unit="GPU-Hours", quantity=0.5),
        entry(T0 + H + 20, "4.00", node_name="n-2", instance_id="i-2", team="nlp",
              unit="GPU-Hours", quantity=1.0),
        entry(T0 + H + 30, "0.75", LedgerKind.ENERGY, node_name="gpu-01", unit="kWh",
              quantity=3.0),
        entry(T0 + 2 * DAY, "10.00", node_name="n-1", instance_id="i-1", team="vision"),
    ]  # fmt: skip
    ledger.add_ledger(rows)
    window = (T0, T0 + DAY)
    page = ledger.ledger_page(LedgerFilter(*window, (("node_name", "n-1"),)))
    assert (page.count, page.cost_micros) == (2, 3_750_000)  # 1.50 + 2.25; Jan 3 is outside
    assert page.quantity == {"GPU-Hours": 2.5}
    assert [r[EXPORT_COLUMNS.index("start_ts")] for r in page.rows] == [T0 + H, T0 + H + 10]
    page = ledger.ledger_page(LedgerFilter(*window, kinds=("job",)), offset=1, limit=1)
    assert (page.count, page.cost_micros) == (2, 5_500_000)  # both job rows count...
    assert [r[EXPORT_COLUMNS.index("instance_id")] for r in page.rows] == ["i-2"]  # ...one shown
    page = ledger.ledger_page(LedgerFilter(*window, unit="kWh"))
    assert (page.count, page.quantity) == (1, {"kWh": 3.0})
    page = ledger.ledger_page(LedgerFilter(*window, (("team", ""),)))  # rows no team owns
    assert page.count == 1 and page.cost_micros == 750_000
    page = ledger.ledger_page(LedgerFilter(*window, instance_ids=frozenset({"i-2", "i-9"})))
    assert (page.count, page.cost_micros) == (1, 4_000_000)
    assert ledger.ledger_page(LedgerFilter(*window, instance_ids=frozenset())).count == 0
    assert ledger.ledger_page(LedgerFilter(*window, (("day", "2026-01-01"),))).count == 4
    with pytest.raises(InvalidArgument, match="cost_micros"):
        ledger.ledger_page(LedgerFilter(*window, (("cost_micros", "1"),)))


def test_grouped_costs_per_dimension_and_kind(ledger: Ledger) -> None:
    three_days(ledger)
    assert ledger.grouped_costs(["team"], FROM, TO) == {
        ("vision",): (Decimal("8.75"), 3),  # 1.50 + 2.25 + 5.00
        ("nlp",): (Decimal("4.75"), 2),  # 4.00 + 0.75
    }
    assert ledger.grouped_costs(["kind", "team"], FROM, TO, ["job"]) == {
        ("job", "vision"): (Decimal("1.50"), 1),
        ("job", "nlp"): (Decimal("4.75"), 2),
    }
    assert ledger.grouped_costs(["kind"], FROM, TO, ["job", "idle"]) == {
        ("job",): (Decimal("6.25"), 3),  # 1.50 + 4.00 + 0.75
        ("idle",): (Decimal("2.25"), 1),
    }
    assert ledger.grouped_costs(["team"], FROM, TO, ["orphan"]) == {}
    assert ledger.grouped_costs(["cloud", "region", "pool"], FROM, TO) == {
        ("aws", "us-east-1", "aws-a100"): (Decimal("3.75"), 2),
        ("gcp", "us-central1", "gcp-a100"): (Decimal("4.75"), 2),
        ("", "", ""): (Decimal("5.00"), 1),
    }
    assert ledger.grouped_costs(["team", "partition"], FROM, TO) == {
        ("vision", "gpu"): (Decimal("6.50"), 2),  # 1.50 + 5.00
        ("vision", ""): (Decimal("2.25"), 1),
        ("nlp", "gpu"): (Decimal("4.00"), 1),
        ("nlp", ""): (Decimal("0.75"), 1),
    }
    assert ledger.grouped_costs(["day", "account"], FROM, TO, ["job"]) == {
        ("2026-01-01", "acct-v"): (Decimal("1.50"), 1),
        ("2026-01-02", "acct-n"): (Decimal("4.00"), 1),
        ("2026-01-03", "acct-n"): (Decimal("0.75"), 1),
    }
    # Every dimension at once.
    got = ledger.grouped_costs(
        ["day", "kind", "team", "account", "user", "partition", "cloud", "region", "pool"],
        FROM,
        TO,
    )
    assert got[("2026-01-02", "onprem", "vision", "", "", "gpu", "", "", "")] == (
        Decimal("5.00"),
        1,
    )
    assert sum(n for _, n in got.values()) == 5


def test_a_group_whose_rows_cancel_out_is_still_there(ledger: Ledger) -> None:
    ledger.add_ledger([entry(T0, "3", team="t"), entry(T0 + 60, "-3", team="t")])
    assert ledger.grouped_costs(["team"], T0, T0 + 3 * DAY) == {("t",): (Decimal(0), 2)}
    assert ledger.spend_by_team(T0, T0 + DAY, ["job"]) == {"t": Decimal(0)}


def test_spend_by_team_counts_whole_utc_days(ledger: Ledger) -> None:
    three_days(ledger)
    # [day_of(Jan 2 00:02:30), day_of(Jan 3 00:00:10)) = the whole of Jan 2, its row at
    # 00:01:40 included although it started before from_ts.
    got = ledger.spend_by_team(T0 + DAY + 150, T0 + 2 * DAY + 10, CLOUD_KINDS)
    assert got == {"vision": Decimal("2.25"), "nlp": Decimal("4.00")}  # on-prem not counted
    assert ledger.spend_by_team(T0 + DAY + 150, T0 + 2 * DAY + 10, ["job"]) == {
        "nlp": Decimal("4.00")
    }
    # Jan 1 to 3 (Jan 4 is the day of `to`, so it is out).
    assert ledger.spend_by_team(T0, T0 + 3 * DAY + 86_000, ["job", "idle", "onprem"]) == {
        "vision": Decimal("8.75"),  # 1.50 + 2.25 + 5.00
        "nlp": Decimal("4.75"),  # 4.00 + 0.75
    }
    assert ledger.spend_by_team(T0, T0 + 5 * DAY, []) == {}
    assert ledger.spend_by_team(T0 + DAY, T0 + DAY + 10, CLOUD_KINDS) == {}  # no whole day


def test_instance_costs_say_which_instances_ran_a_job(ledger: Ledger) -> None:
    ledger.add_ledger(
        [
            entry(T0, "1.50", instance_id="i-1", job_id="j-1"),
            entry(T0 + 60, "0.50", LedgerKind.IDLE, instance_id="i-1"),
            entry(T0, "2.00", LedgerKind.UNBOUND, instance_id="i-2"),
            entry(T0 + 120, "0.25", LedgerKind.ORPHAN, instance_id="i-3"),
            entry(T0, "5.00", LedgerKind.ONPREM, job_id="j-9"),  # no instance: not counted
            entry(T0 + DAY, "9.00", LedgerKind.IDLE, instance_id="i-2"),  # outside the window
        ]
    )
    got = ledger.instance_costs(T0, T0 + DAY, CLOUD_KINDS)
    assert got == {
        "i-1": (Decimal("2.00"), Decimal("1.50")),
        "i-2": (Decimal("2.00"), Decimal(0)),
        "i-3": (Decimal("0.25"), Decimal(0)),
    }
    assert ledger.instance_costs(T0, T0 + DAY, ["job"]) == {"i-1": (Decimal("1.50"),) * 2}


def test_ledger_export_streams_tuples_of_the_export_columns(ledger: Ledger) -> None:
    e = LedgerEntry(
        start_ts=T0 + 60,
        end_ts=T0 + H,
        kind=LedgerKind.JOB,
        cost=Decimal("1.5"),
        cloud="aws",
        region="us-east-1",
        pool="aws-a100",
        instance_id="i-1",
        node_name="cloud-1",
        offer=str(SPOT),
        instance_type="p4d.24xlarge",
        capacity="spot",
        job_id="42",
        team="vision",
        account="acct-v",
        user="alice",
        partition="gpu",
        decision_id="d-1",
        gpus=4,
        quantity=2.0,
        unit="GPU-hour",
        unit_price=Decimal("0.75"),
    )
    ledger.add_ledger([e])
    (chunk,) = list(ledger.ledger_export())
    (row,) = chunk
    assert len(EXPORT_COLUMNS) == 22
    assert tuple(row) == (
        T0 + 60,
        T0 + H,
        "2026-01-01",
        "job",
        "aws",
        "us-east-1",
        "aws-a100",
        "i-1",
        "cloud-1",
        "aws/us-east-1/p4d.24xlarge/spot",
        "p4d.24xlarge",
        "spot",
        "42",
        "vision",
        "acct-v",
        "alice",
        "gpu",
        "d-1",
        2.0,
        "GPU-hour",
        750_000,  # $0.75 in micro-dollars
        1_500_000,  # $1.50
    )


def test_ledger_export_in_start_order_in_chunks_over_a_window(ledger: Ledger) -> None:
    assert list(ledger.ledger_export()) == []
    starts = [T0 + 40, T0 + 10, T0 + 30, T0 + 10, T0 + 20, T0 + 50]
    ledger.add_ledger([entry(s, str(i + 1)) for i, s in enumerate(starts)])
    chunks = [[tuple(r) for r in c] for c in ledger.ledger_export(chunk_rows=2)]
    assert [len(c) for c in chunks] == [2, 2, 2]
    flat = [r for c in chunks for r in c]
    start_col, cost_col = EXPORT_COLUMNS.index("start_ts"), EXPORT_COLUMNS.index("cost_micros")
    # Start order, ties in the order written: costs $2 and $4 both start at T0 + 10.
    assert [(r[start_col], r[cost_col]) for r in flat] == [
        (T0 + 10, 2_000_000),
        (T0 + 10, 4_000_000),
        (T0 + 20, 5_000_000),
        (T0 + 30, 3_000_000),
        (T0 + 40, 1_000_000),
        (T0 + 50, 6_000_000),
    ]
    window = [tuple(r) for c in ledger.ledger_export(T0 + 20, T0 + 50, chunk_rows=2) for r in c]
    assert [r[start_col] for r in window] == [T0 + 20, T0 + 30, T0 + 40]
    sizes = [len(c) for c in ledger.ledger_export(T0 + 20, T0 + 50, chunk_rows=2)]
    assert sizes == [2, 1]
    assert list(ledger.ledger_export(T0 + 100)) == []


# ----------------------------------------------------------------------------- Ledger: usage


def usage(job: str, node: str, start: float, **kw: Any) -> JobUsage:
    return JobUsage(job, node, kw.pop("gpus", 4), start, **kw)


def usage_id(u: JobUsage) -> int:
    assert u.usage_id is not None, "the store gives every usage record an id"
    return u.usage_id


def test_job_usage_is_upserted_by_job_node_and_start(ledger: Ledger) -> None:
    u = usage("42", "cloud-1", T0, instance_id="i-1", account="a", team="t")
    assert ledger.record_job_usage([u]) == 1
    (first,) = ledger.job_usage()
    assert first.usage_id is not None and first.billed_until_ts is None
    # The same key again, changed: one record, its id kept, the new values in.
    changed = usage("42", "cloud-1", T0, gpus=8, instance_id="i-1", team="t2", user="bob")
    assert ledger.record_job_usage([changed, changed]) == 2
    (got,) = ledger.job_usage()
    assert got.usage_id == first.usage_id
    assert (got.gpus, got.team, got.user, got.account) == (8, "t2", "bob", "")
    # Another start, node or job is another record.
    ledger.record_job_usage(
        [usage("42", "cloud-1", T0 + 1), usage("42", "cloud-2", T0), usage("43", "cloud-1", T0)]
    )
    assert len(ledger.job_usage()) == 4
    assert len({x.usage_id for x in ledger.job_usage()}) == 4


def test_a_usage_record_given_an_id_or_watermark_gets_the_stores(ledger: Ledger) -> None:
    ledger.record_job_usage([usage("42", "n1", T0, usage_id=999, billed_until_ts=T0 + 5)])
    (got,) = ledger.job_usage()
    assert got.billed_until_ts is None
    assert got.usage_id is not None


def test_a_usage_batch_that_breaks_half_way_records_nothing(ledger: Ledger) -> None:
    with pytest.raises(RuntimeError):
        ledger.record_job_usage(failing_after([usage("1", "n1", T0)], RuntimeError()))
    assert ledger.job_usage() == []


def test_end_job_closes_only_the_open_records_of_that_job(ledger: Ledger) -> None:
    ledger.record_job_usage(
        [
            usage("42", "n1", T0),
            usage("42", "n2", T0),
            usage("42", "n3", T0, end_ts=T0 + 50),
            usage("43", "n1", T0),
        ]
    )
    assert ledger.end_job("42", T0 + 100) == 2
    assert ledger.end_job("42", T0 + 200) == 0  # nothing open any more
    assert ledger.end_job("nope", T0 + 200) == 0
    ends = {(u.job_id, u.node_name): u.end_ts for u in ledger.job_usage()}
    assert ends == {
        ("42", "n1"): T0 + 100,
        ("42", "n2"): T0 + 100,
        ("42", "n3"): T0 + 50,
        ("43", "n1"): None,
    }


def test_job_usage_filters_and_order(ledger: Ledger) -> None:
    ledger.record_job_usage(
        [
            usage("c", "cloud-1", T0 + 200, instance_id="i-1"),  # running
            usage("a", "cloud-1", T0, end_ts=T0 + 100, instance_id="i-1"),
            usage("b", "onprem-1", T0 + 50, end_ts=T0 + 150),
            usage("d", "onprem-1", T0 + 50, end_ts=T0 + 60),  # same start as b, written later
        ]
    )

    def jobs(**kw: Any) -> list[str]:
        return [u.job_id for u in ledger.job_usage(**kw)]

    assert jobs() == ["a", "b", "d", "c"]  # start order, ties in the order written
    assert jobs(node_name="cloud-1") == ["a", "c"]
    assert jobs(instance_id="i-1") == ["a", "c"]
    assert jobs(instance_id="") == ["b", "d"]
    assert jobs(onprem_only=True) == ["b", "d"]
    assert jobs(onprem_only=True, node_name="cloud-1") == []
    # overlapping (a, b): started before b, and running or ended after a.
    assert jobs(overlapping=(T0 + 100, T0 + 200)) == ["b"]  # a ended at 100; c starts at 200
    assert jobs(overlapping=(T0 + 99, T0 + 201)) == ["a", "b", "c"]
    assert jobs(overlapping=(T0 + 1000, T0 + 1000)) == ["c"]  # running: open-ended
    assert jobs(overlapping=(T0 + 55, T0 + 55)) == ["a", "b", "d"]


def test_unbilled_usage_is_what_the_ledger_has_not_covered(ledger: Ledger) -> None:
    ledger.record_job_usage(
        [
            usage("running", "n1", T0),
            usage("ended", "n1", T0 + 10, end_ts=T0 + 100),
            usage("short", "n1", T0 + 20, end_ts=T0 + 100),
            usage("full", "n1", T0 + 30, end_ts=T0 + 100),
            usage("later", "n1", T0 + 500),
        ]
    )
    ids = {u.job_id: usage_id(u) for u in ledger.job_usage()}
    ledger.commit_billing(
        [],
        usage_marks=[
            BillingMark(ids["running"], None, T0 + 50),
            BillingMark(ids["short"], None, T0 + 99),
            BillingMark(ids["full"], None, T0 + 100),
        ],
    )
    got = [u.job_id for u in ledger.job_usage(unbilled_at=T0 + 500)]
    # running: still open; ended: never billed; short: billed short of its end; full: covered;
    # later: starts at `unbilled_at`, not before it.
    assert got == ["running", "ended", "short"]


# ----------------------------------------------------------------------------- Ledger: billing


def test_commit_billing_moves_an_instance_watermark_with_its_rows(impl: Impl) -> None:
    ledger = impl.ledger
    impl.add_instance("i-1")
    assert impl.instance_billing("i-1") == (None, 0.0)
    rows = [entry(T0, "0.5", LedgerKind.IDLE, instance_id="i-1")]
    assert ledger.commit_billing(rows, instance_marks=[BillingMark("i-1", None, T0 + 60, 60)]) == 1
    assert impl.instance_billing("i-1") == (T0 + 60, 60.0)
    more = [entry(T0 + 60, "0.25", instance_id="i-1"), entry(T0 + 60, "0.25", instance_id="i-1")]
    assert (
        ledger.commit_billing(more, instance_marks=[BillingMark("i-1", T0 + 60, T0 + 90, 30)]) == 2
    )
    assert impl.instance_billing("i-1") == (T0 + 90, 90.0)  # 60 + 30 seconds
    assert ledger.ledger_total() == Decimal("1")  # 0.5 + 0.25 + 0.25
    # Marks alone, with no rows.
    assert ledger.commit_billing([], instance_marks=[BillingMark("i-1", T0 + 90, T0 + 95)]) == 0
    assert impl.instance_billing("i-1") == (T0 + 95, 90.0)


def test_marks_of_one_instance_in_one_commit_apply_in_order(impl: Impl) -> None:
    impl.add_instance("i-1")
    marks = [BillingMark("i-1", None, T0 + 60, 60), BillingMark("i-1", T0 + 60, T0 + 120, 60)]
    impl.ledger.commit_billing([], instance_marks=marks)
    assert impl.instance_billing("i-1") == (T0 + 120, 120.0)


def test_a_moved_instance_watermark_refuses_the_whole_commit(impl: Impl) -> None:
    ledger = impl.ledger
    impl.add_instance("i-1")
    impl.add_instance("i-2")
    row = entry(T0, "0.5", LedgerKind.IDLE, instance_id="i-1")
    ledger.commit_billing([row], instance_marks=[BillingMark("i-1", None, T0 + 60, 60)])
    # Another biller read the watermark before it moved: its whole commit is refused, the
    # good mark of i-2 with it.
    with pytest.raises(ConcurrentUpdate):
        ledger.commit_billing(
            [entry(T0, "9", instance_id="i-1"), entry(T0, "9", instance_id="i-2")],
            instance_marks=[
                BillingMark("i-2", None, T0 + 60, 60),
                BillingMark("i-1", None, T0 + 60, 60),
            ],
        )
    assert ledger.ledger_entries() == [row]
    assert impl.instance_billing("i-1") == (T0 + 60, 60.0)
    assert impl.instance_billing("i-2") == (None, 0.0)


def test_a_moved_usage_watermark_refuses_the_whole_commit(impl: Impl) -> None:
    ledger = impl.ledger
    impl.add_instance("i-1")
    ledger.record_job_usage([usage("42", "n1", T0), usage("43", "n1", T0)])
    u42, u43 = (u.usage_id for u in ledger.job_usage())
    assert u42 is not None and u43 is not None
    ledger.commit_billing([entry(T0, "1", "onprem")], usage_marks=[BillingMark(u42, None, T0 + 60)])
    assert [u.billed_until_ts for u in ledger.job_usage()] == [T0 + 60, None]
    with pytest.raises(ConcurrentUpdate):
        ledger.commit_billing(
            [entry(T0 + 60, "2", "onprem")],
            instance_marks=[BillingMark("i-1", None, T0 + 60, 60)],
            usage_marks=[BillingMark(u43, None, T0 + 60), BillingMark(u42, T0, T0 + 120)],
        )
    assert [u.billed_until_ts for u in ledger.job_usage()] == [T0 + 60, None]
    assert impl.instance_billing("i-1") == (None, 0.0)
    assert ledger.ledger_total() == Decimal("1")


def test_an_unknown_instance_or_usage_refuses_the_whole_commit(impl: Impl) -> None:
    ledger = impl.ledger
    impl.add_instance("i-1")
    ledger.record_job_usage([usage("42", "n1", T0)])
    (u,) = ledger.job_usage()
    assert u.usage_id is not None
    with pytest.raises(NotFound):
        ledger.commit_billing(
            [entry(T0, "1")],
            instance_marks=[BillingMark("i-1", None, T0 + 60, 60), BillingMark("i-9", None, T0)],
        )
    with pytest.raises(NotFound):
        ledger.commit_billing(
            [entry(T0, "1")],
            instance_marks=[BillingMark("i-1", None, T0 + 60, 60)],
            usage_marks=[
                BillingMark(u.usage_id, None, T0 + 60),
                BillingMark(u.usage_id + 99, None, T0),
            ],
        )
    assert ledger.ledger_entries() == []
    assert impl.instance_billing("i-1") == (None, 0.0)
    assert [x.billed_until_ts for x in ledger.job_usage()] == [None]


def test_a_bad_row_refuses_the_whole_commit_marks_included(impl: Impl) -> None:
    ledger = impl.ledger
    impl.add_instance("i-1")
    ledger.record_job_usage([usage("42", "n1", T0)])
    (u,) = ledger.job_usage()
    assert u.usage_id is not None
    with pytest.raises(StoreError):
        ledger.commit_billing(
            [entry(T0, "1"), entry(T0 + DAY - 30, "1", length=60.0)],  # the second straddles
            instance_marks=[BillingMark("i-1", None, T0 + 60, 60)],
            usage_marks=[BillingMark(u.usage_id, None, T0 + 60)],
        )
    assert ledger.ledger_entries() == []
    assert impl.instance_billing("i-1") == (None, 0.0)
    assert [x.billed_until_ts for x in ledger.job_usage()] == [None]


def test_an_upsert_keeps_the_usage_watermark(ledger: Ledger) -> None:
    ledger.record_job_usage([usage("42", "n1", T0)])
    (u,) = ledger.job_usage()
    assert u.usage_id is not None
    ledger.commit_billing([], usage_marks=[BillingMark(u.usage_id, None, T0 + 60)])
    ledger.record_job_usage([usage("42", "n1", T0, end_ts=T0 + 100)])
    (got,) = ledger.job_usage()
    assert (got.usage_id, got.billed_until_ts, got.end_ts) == (u.usage_id, T0 + 60, T0 + 100)
