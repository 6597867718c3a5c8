"""Every money figure in a Costs table links to the ledger rows it sums: the linked page lists
those rows, and they add up to the figure. Also the ledger page's filters and bad input, and the
hourly chart of a one-day window.

The seed (api_helpers.seed) bills instance i-1 at $9.83/h from NOW-3800 to NOW-60: 200 s before
it joined Slurm (`unbound`), 600 s no job used (`idle`) and 2,940 s of job 101 (`job`); and
on-prem job 100 ran 8 GPUs x 1 h x $1.20 on gpu-01 from NOW-7200. NOW is 2026-01-11 00:00 UTC.
"""

from __future__ import annotations

import html
import json
import re
from decimal import Decimal

import pytest
from api_helpers import Env
from test_console_http import sign_in

DAY = {"from": "2026-01-10", "to": "2026-01-11"}
LINKED = re.compile(r'data-usd="([^"]+)"><a href="(/ledger\?[^"]+)"')
HOURS = re.compile(r'data-field="gpu_hours_paid"><a href="(/ledger\?[^"]+)">([0-9.]+)</a>')


def ledger_sum(env: Env, href: str) -> tuple[Decimal, list[Decimal]]:
    """The linked page's total, and the costs of the rows it lists (one page)."""
    r = env.client.get(html.unescape(href))
    assert r.status_code == 200, r.text[:500]
    total = Decimal(re.search(r'id="ledger-sum" data-usd="([^"]+)"', r.text).group(1))
    table = r.text[r.text.index('id="ledger-table"') :] if 'id="ledger-table"' in r.text else ""
    rows = [Decimal(v) for v in re.findall(r'data-usd="([^"]+)"', table)]
    assert 'class="pager"' not in r.text  # one page: the listed rows are all of them
    return total, rows


@pytest.mark.parametrize("key", ["team", "account", "pool", "node", "cloud", "kind", "day"])
def test_every_cost_figure_links_to_the_rows_it_sums(env: Env, key: str):
    sign_in(env, "viewer")
    page = env.client.get("/costs", params={"group_by": key, **DAY}).text
    links = LINKED.findall(page)
    # each group of the key table, the kind table, and the efficiency card's money columns
    assert len(links) >= 4, page[:3000]
    for usd, href in links:
        total, rows = ledger_sum(env, href)
        assert total == Decimal(usd), href
        assert sum(rows, Decimal(0)) == total, href
    for href, hours in HOURS.findall(page):
        r = env.client.get(html.unescape(href)).text
        qty = float(re.search(r'data-unit="GPU-Hours" data-quantity="([^"]+)"', r).group(1))
        assert f"{qty:.2f}" == hours


def test_the_figures_link_to_hand_computed_rows(env: Env):
    """The links' pages, checked against the seed by hand (not against the report)."""
    sign_in(env, "viewer")
    idle = env.client.get("/ledger", params={"team": "vision", "kind": "idle", **DAY}).text
    assert re.search(r'id="ledger-sum" data-usd="1\.638333"', idle)  # 9.83 x 600 / 3600
    node = env.client.get("/ledger", params={"node": "gpu-01", **DAY}).text
    assert re.search(r'id="ledger-sum" data-usd="9\.600000"', node)
    assert re.search(r'id="ledger-count" data-count="1"', node)
    # i-1 ran job 101, so no row is on an instance that never ran a job
    never = env.client.get("/ledger", params={"never_ran": "1", **DAY}).text
    assert re.search(r'id="ledger-sum" data-usd="0\.000000"', never)
    assert "No ledger row matches" in never
    # "project" is the account; an empty value is a filter: rows no project owns (idle and
    # unbound time of i-1: 9.83 x 800 / 3600)
    empty = env.client.get("/ledger", params={"project": "", **DAY}).text
    assert re.search(r'id="ledger-sum" data-usd="2\.184444"', empty)


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"from": "2026-01-11", "to": "2026-01-10"}, "'to' must be after 'from'"),
        ({"kind": "bogus", **DAY}, "kind"),
        ({"never_ran": "maybe", **DAY}, "never_ran"),
        ({"team": "x" * 300, **DAY}, "team"),
        ({"page": "2", **DAY}, "no more ledger rows"),
        ({"page": "-1", **DAY}, "page"),
        ({"from": "yesterday"}, "from"),
    ],
)
def test_bad_ledger_queries_say_what_is_wrong(env: Env, params, words):
    sign_in(env, "viewer")
    r = env.client.get("/ledger", params=params)
    assert r.status_code == 400 and words in html.unescape(r.text), r.text[-1000:]


def test_a_one_day_window_is_charted_by_hour(env: Env):
    sign_in(env, "viewer")
    page = env.client.get("/costs", params={"group_by": "kind", **DAY}).text
    assert "By kind and hour (UTC)" in page
    chart = json.loads(re.search(r'id="cost-data">([^<]+)</script>', page).group(1))
    assert len(chart["labels"]) == 24 and chart["labels"][0] == "01-10 00:00"
    per = {
        d["label"]: dict(zip(chart["labels"], d["data"], strict=True)) for d in chart["datasets"]
    }
    # hand: on-prem from 22:00; unbound from 22:56:40; idle and job from 23:00 on
    assert per["onprem"]["01-10 22:00"] == pytest.approx(9.6)
    assert per["unbound"]["01-10 22:00"] == pytest.approx(9.83 * 200 / 3600, abs=1e-6)
    assert per["idle"]["01-10 23:00"] == pytest.approx(9.83 * 600 / 3600, abs=1e-6)
    assert per["job"]["01-10 23:00"] == pytest.approx(9.83 * 2940 / 3600, abs=1e-6)
    assert sum(sum(d["data"]) for d in chart["datasets"]) == pytest.approx(19.812278)
    # a longer window stays by day
    week = env.client.get("/costs", params={"from": "2026-01-04", "to": "2026-01-11"}).text
    assert "By team and day" in week


def test_budget_spend_links_to_the_months_cloud_rows(env: Env):
    sign_in(env, "viewer")
    page = env.client.get("/budgets").text
    links = LINKED.findall(page)
    assert links, page[-3000:]
    for usd, href in links:
        total, rows = ledger_sum(env, href)
        assert total == Decimal(usd) and sum(rows, Decimal(0)) == total
    # vision's cloud dollars this month, by hand: i-1's 3,740 billed s at $9.83/h
    assert ("10.212278", "vision") in [
        (usd, re.search(r"team=(\w+)", href).group(1)) for usd, href in links
    ]


def test_the_gpus_page_shows_todays_efficiency_by_node_linked_to_its_rows(env: Env):
    """At 23:50 on the seed's day: the on-prem node gpu-01 ($9.60 from 22:00) and the cloud
    node cloud-1 (i-1's rows starting before 23:50) each have their row, linked like Costs."""
    from datetime import UTC, datetime, timedelta

    env.clock.set(datetime(2026, 1, 11, tzinfo=UTC) - timedelta(minutes=10))
    sign_in(env, "viewer")
    page = env.client.get("/gpus").text
    assert "Efficiency and waste by node, today (UTC)" in page
    assert 'data-key="gpu-01"' in page and 'data-key="cloud-1"' in page
    links = LINKED.findall(page)
    assert len(links) >= 8  # idle, never ran, cost: for two nodes and the total
    for usd, href in links:
        total, rows = ledger_sum(env, href)
        assert total == Decimal(usd) and sum(rows, Decimal(0)) == total, href
    gpu01 = re.search(r'data-key="gpu-01">.*?data-field="cost_usd" data-usd="([^"]+)"', page, re.S)
    assert gpu01 and Decimal(gpu01.group(1)) == Decimal("9.6")
