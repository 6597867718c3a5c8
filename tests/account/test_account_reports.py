"""Reports: group by any keys over any window, from SQL, equal to a brute-force sum; CSV;
budget status."""

from __future__ import annotations

import csv
import io
import random
from decimal import Decimal

import pytest
from account_helpers import DAY, POLICY, T0, launch

from provisioner.account.budgets import budget_status, month_bounds
from provisioner.account.reports import (
    GROUP_KEYS,
    ReportError,
    cost_report,
    parse_group_by,
    report_to_csv,
)
from provisioner.domain.records import LedgerEntry
from provisioner.store import Store
from provisioner.store.ledger import pick_grain
from provisioner.store.models import GRAINS

D = Decimal
TEAMS = ("vision", "nlp", "speech")
CLOUDS = (("aws", "us-east-1", "aws-a100"), ("gcp", "us-central1", "gcp-a100"), ("", "", "onprem"))


def random_entries(n: int, seed: int = 7) -> list[LedgerEntry]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        start = T0 - 3 * DAY + rng.random() * 9 * DAY
        end = min(start + rng.random() * 3600, (start // DAY + 1) * DAY)
        cloud, region, pool = rng.choice(CLOUDS)
        team = rng.choice(TEAMS)
        out.append(
            LedgerEntry(
                start_ts=start,
                end_ts=end,
                kind=rng.choice(("job", "idle")) if cloud else "onprem",
                cost=D(rng.randint(0, 5_000_000)).scaleb(-6),
                cloud=cloud,
                region=region,
                pool=pool,
                team=team,
                account=f"acct-{team[0]}{rng.randint(1, 2)}",
                user=f"u{rng.randint(1, 5)}",
                partition=rng.choice(("cloud", "onprem")),
                node_name=f"{pool}-{rng.randint(0, 3)}",
                gpu_part=rng.choice(("", "1g.10gb", "3g.40gb", "shard")),
            )
        )
    return out


# The entry field each report key reads (a project is the Slurm account).
FIELD = {"project": "account", "node": "node_name", "slice": "gpu_part"}


def brute(entries, keys, a, b, kinds=()):
    out: dict[tuple, list] = {}
    for e in entries:
        if not (a <= e.start_ts < b) or (kinds and e.kind not in kinds):
            continue
        k = tuple(e.day if key == "day" else getattr(e, FIELD.get(key, key)) for key in keys)
        acc = out.setdefault(k, [D(0), 0])
        acc[0] += e.cost
        acc[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('reports') / 'r.sqlite'}")
    entries = random_entries(3000)
    for i in range(0, len(entries), 700):
        store.add_ledger(entries[i : i + 700])
    yield store, entries
    store.close()


@pytest.mark.parametrize(
    "keys",
    [
        (),
        ("team",),
        ("team", "day"),
        ("cloud", "region", "pool"),
        ("account", "user", "partition", "kind"),
        ("project", "node", "day"),
        ("node",),
        ("slice",),
        ("slice", "team", "day"),
        GROUP_KEYS,
    ],
)
@pytest.mark.parametrize(
    "window",
    [
        (T0, T0 + DAY),  # one whole day
        (T0 - 2 * DAY, T0 + 4 * DAY),  # whole days only
        (T0 - 1.5 * DAY + 17.25, T0 + 3 * DAY + 3601),  # partial days at both edges
        (T0 + 3600, T0 + 7200),  # inside one day
        (T0 - 30 * DAY, T0 + 30 * DAY),  # past the data
    ],
)
def test_report_equals_brute_force(filled, keys, window):
    store, entries = filled
    a, b = window
    report = cost_report(store, keys, a, b)
    got = {r.key: (r.cost, r.rows) for r in report.rows}
    assert got == brute(entries, keys, a, b)
    assert report.total == sum((c for c, _ in got.values()), D(0))


@pytest.mark.parametrize(
    "keys",
    [(), ("team",), ("user",), ("pool", "day"), ("region", "user"), ("node",), ("slice",)],
)
def test_kind_filter(filled, keys):
    store, entries = filled
    a, b = T0 - DAY - 7, T0 + 2 * DAY + 5
    report = cost_report(store, keys, a, b, kinds=("idle", "onprem"))
    got = {r.key: (r.cost, r.rows) for r in report.rows}
    assert got == brute(entries, keys, a, b, ("idle", "onprem"))


def test_grain_choice():
    assert GRAINS[pick_grain(("team", "day"))] == ("kind", "team")
    assert GRAINS[pick_grain((), kinds=("job",))] == ("kind", "team")
    assert GRAINS[pick_grain(("partition",))] == ("kind", "team", "partition")
    assert GRAINS[pick_grain(("cloud", "pool"))] == ("kind", "team", "cloud", "region", "pool")
    assert GRAINS[pick_grain(("user",))] == ("kind", "team", "account", "user")
    assert pick_grain(("user", "pool")) == 0
    assert pick_grain(("node_name", "team")) is None  # no rollup keeps the node
    assert pick_grain(("gpu_part",), kinds=("job",)) is None  # nor the slice


def test_rollups_can_be_rebuilt(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'rebuild.sqlite'}")
    store.add_ledger(random_entries(500, seed=3))
    before = cost_report(store, ("team", "day"), T0 - 5 * DAY, T0 + 9 * DAY)
    store.rebuild_rollups()
    assert cost_report(store, ("team", "day"), T0 - 5 * DAY, T0 + 9 * DAY) == before


def test_csv_rendering(store):
    store.add_ledger(
        [
            LedgerEntry(T0 + 10, T0 + 20, "job", D("1.5"), team="vision"),
            LedgerEntry(T0 + DAY + 10, T0 + DAY + 20, "idle", D("0.25"), team="vision"),
            LedgerEntry(T0 + 10, T0 + 20, "job", D("2"), team="nlp"),
        ]
    )
    text = report_to_csv(cost_report(store, ("team", "day"), T0, T0 + 2 * DAY))
    rows = list(csv.reader(io.StringIO(text)))
    assert rows == [
        ["team", "day", "cost_usd", "ledger_rows"],
        ["nlp", "2026-01-01", "2.000000", "1"],
        ["vision", "2026-01-01", "1.500000", "1"],
        ["vision", "2026-01-02", "0.250000", "1"],
    ]


@pytest.mark.parametrize("bad", ["tea", "team,team", "team,;drop", "day,cost"])
def test_bad_group_by_is_refused(bad):
    with pytest.raises(ReportError):
        parse_group_by(bad)


def test_bad_window_is_refused(store):
    with pytest.raises(ReportError):
        cost_report(store, ("team",), T0, T0)


def test_budget_status(store):
    # This month (January 2026): vision spent $300 on cloud (job + idle); on-prem is not
    # counted against the cloud budget. One live $10/h instance for vision, 10 days left.
    store.sync_budgets(POLICY.budgets, T0)
    store.add_ledger(
        [
            LedgerEntry(T0 + 100, T0 + 200, "job", D("250"), team="vision"),
            LedgerEntry(T0 + 100, T0 + 200, "idle", D("50"), team="vision"),
            LedgerEntry(T0 + 100, T0 + 200, "onprem", D("999"), team="vision"),
            LedgerEntry(T0 - 100, T0 - 50, "job", D("77"), team="vision"),  # last month
            LedgerEntry(T0 + 100, T0 + 200, "job", D("12"), team="nlp"),
        ]
    )
    launch(store, "i-1", at=T0, price="10", team="vision")
    m0, m1 = month_bounds(T0 + 5)
    assert (m0, m1) == (T0, T0 + 31 * DAY)
    now = m1 - 10 * DAY
    b = budget_status(store, now)
    teams = {t.team: t for t in b.teams}
    v = teams["vision"]
    assert v.spent_usd == D("300.000000")
    assert v.burn_usd_hr == D("10")
    assert v.forecast_usd == D("300") + D("10") * 240  # $2,700
    assert v.headroom_usd == D("700")
    assert v.used_ratio == pytest.approx(0.3)
    assert v.over_forecast
    n = teams["nlp"]
    assert n.monthly_usd is None and n.spent_usd == D("12") and n.headroom_usd is None
    assert b.global_usd_per_hour == D("100") and b.global_headroom_usd_hr == D("90")


def test_month_bounds_in_december():
    dec_15 = T0 - 17 * DAY
    a, b = month_bounds(dec_15)
    assert b == T0 and a == T0 - 31 * DAY
