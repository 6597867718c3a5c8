"""`GET /v1/efficiency`: GPU-hours paid (the ledger's GPU-hour rows) against GPU-hours used
(NVML, per hour), per team, project, pool and node, with idle and never-ran dollars. Every
expected figure is worked out by hand from the rows written here."""

from __future__ import annotations

from decimal import Decimal

import pytest
from api_helpers import NOW, make_env

from provisioner.domain.gpu_usage import GpuUsage
from provisioner.domain.job_records import JobRecord
from provisioner.domain.records import LedgerEntry, LedgerKind
from provisioner.store import Store

H = 3600.0
A = NOW - 3 * H  # 21:00 on the window's day: the rows' hour
WINDOW = {"from": "2026-01-10T20:00:00Z", "to": "2026-01-11T00:00:00Z"}


def gh(kind, cost, qty, **kw):
    return LedgerEntry(A, A + H, kind, Decimal(cost), quantity=qty, unit="GPU-Hours", **kw)


@pytest.fixture
def env(db_url):
    store = Store(db_url)
    cloud1 = dict(cloud="aws", pool="aws-a100", instance_id="i-1", node_name="cloud-1")
    cloud2 = dict(cloud="aws", pool="aws-a100", instance_id="i-2", node_name="cloud-2")
    store.add_ledger(
        [
            # i-1 ran job 7 (vision, acct-v) on 8 GPUs for the hour, and 2 GPU-hours idle
            gh(LedgerKind.JOB, "10.00", 8.0, job_id="7", team="vision", account="acct-v", **cloud1),
            gh(LedgerKind.IDLE, "2.50", 2.0, team="vision", **cloud1),
            # i-2 never ran a job: 4 GPU-hours unbound, charged to nlp whose demand bought it
            gh(LedgerKind.UNBOUND, "5.00", 4.0, team="nlp", **cloud2),
            # on-prem: job 9 (nlp, acct-n) on gpu-01, 8 GPU-hours
            gh(
                LedgerKind.ONPREM,
                "9.60",
                8.0,
                job_id="9",
                team="nlp",
                account="acct-n",
                pool="onprem",
                node_name="gpu-01",
            ),
            # energy has no GPU-hours: dollars only
            LedgerEntry(
                A,
                A + H,
                LedgerKind.ENERGY,
                Decimal("0.40"),
                pool="onprem",
                node_name="gpu-01",
                unit="kWh",
                quantity=2.0,
            ),
        ]
    )
    store.add_gpu_usage(
        [
            GpuUsage(A, "cloud-1", 0, "7", H, 0.5 * H, H),  # job 7 at 50% for the hour
            GpuUsage(A, "cloud-1", 1, "", H, 0.0, 0.0),  # watched, no job: nobody's
            GpuUsage(A, "gpu-01", 0, "9", H, H, H),  # job 9 at 100%
            GpuUsage(A - 5 * H, "gpu-01", 0, "9", H, H, H),  # before the window
        ]
    )
    store.record_jobs(
        [
            JobRecord(
                "7",
                A - 600,
                "completed",
                8,
                team="vision",
                account="acct-v",
                start_ts=A,
                end_ts=A + H,
                last_seen_ts=A + H,
            ),
            JobRecord(
                "9",
                A - 600,
                "completed",
                8,
                team="nlp",
                account="acct-n",
                start_ts=A,
                end_ts=A + H,
                last_seen_ts=A + H,
            ),
        ]
    )
    e = make_env(store)
    yield e
    e.client.close()
    store.close()


def report(env, group_by):
    r = env.client.get(
        "/v1/efficiency", params={"group_by": group_by, **WINDOW}, headers=env.h("viewer")
    )
    assert r.status_code == 200, r.text
    body = r.json()
    return {row["key"]: row for row in body["rows"]}, body["total"]


def test_by_team(env):
    rows, total = report(env, "team")
    v, n, nobody = rows["vision"], rows["nlp"], rows[""]
    assert (v["gpu_hours_paid"], v["gpu_hours_used_util"], v["gpu_hours_used_busy"]) == (
        10.0, 0.5, 1.0)  # fmt: skip
    assert v["efficiency_util"] == 0.05 and v["efficiency_busy"] == 0.1
    assert (v["cost_usd"], v["idle_usd"], v["never_ran_usd"]) == ("12.500000", "2.500000",
                                                                  "0.000000")  # fmt: skip
    assert (n["gpu_hours_paid"], n["gpu_hours_used_util"]) == (12.0, 1.0)
    assert (n["cost_usd"], n["never_ran_usd"]) == ("14.600000", "5.000000")  # energy: no team
    assert nobody["cost_usd"] == "0.400000"
    assert nobody["gpu_hours_paid"] == 0.0 and nobody["gpu_hours_observed"] == 1.0
    assert nobody["efficiency_util"] is None
    assert total["gpu_hours_paid"] == 22.0 and total["cost_usd"] == "27.500000"
    assert total["gpu_hours_used_util"] == 1.5 and total["gpu_hours_observed"] == 3.0


def test_by_project_pool_and_node(env):
    rows, _ = report(env, "project")
    assert rows["acct-v"]["gpu_hours_paid"] == 8.0 and rows["acct-v"]["gpu_hours_used_util"] == 0.5
    assert rows[""]["gpu_hours_paid"] == 6.0  # idle and unbound rows have no project
    rows, _ = report(env, "pool")
    assert rows["aws-a100"]["gpu_hours_paid"] == 14.0
    assert rows["aws-a100"]["gpu_hours_used_busy"] == 1.0  # cloud-1's pool, from the ledger
    assert (
        rows["onprem"]["gpu_hours_used_util"] == 1.0 and rows["onprem"]["cost_usd"] == "10.000000"
    )
    rows, _ = report(env, "node")
    assert (
        rows["cloud-2"]["never_ran_usd"] == "5.000000"
        and rows["cloud-2"]["gpu_hours_used_util"] == 0
    )
    assert (
        rows["cloud-1"]["gpu_hours_observed"] == 2.0 and rows["cloud-1"]["efficiency_util"] == 0.05
    )


def test_bad_input_is_a_clear_4xx(env):
    h = env.h("viewer")
    r = env.client.get("/v1/efficiency", params={"group_by": "colour"}, headers=h)
    assert r.status_code == 422
    r = env.client.get(
        "/v1/efficiency", params={"from": "2026-01-11", "to": "2026-01-10"}, headers=h
    )
    assert r.status_code == 400 and "after" in r.text


def test_the_costs_page_shows_the_same_figures_with_links_to_the_rows(env):
    """The console's efficiency card is the API's report for the page's window, each group
    linking to the rows behind it (a team's jobs, a node's jobs, a pool's instances)."""
    import re

    r = env.client.post("/login", data={"token": env.tokens["viewer"], "next": "/"})
    assert r.status_code in (200, 303)
    for dim, link in (("team", "/jobs?team=vision"), ("node", "/jobs?ran_on=cloud-1"),
                      ("pool", "/instances?pool=aws-a100"), ("project", None)):  # fmt: skip
        page = env.client.get("/costs", params={**WINDOW, "eff_by": dim}).text
        card = page[page.index('id="efficiency"') :]
        rows, total = report(env, dim)
        shown = re.findall(
            r'<tr(?: class="total")? data-key="([^"]*)">.*?data-field="never_ran_usd" '
            r'data-usd="([^"]+)"',
            card,
            flags=re.S,
        )
        assert shown == [(k, rows[k]["never_ran_usd"]) for k in rows] + [
            ("total", total["never_ran_usd"])
        ]
        if link:
            assert f'href="{link}"' in card, dim
    r = env.client.get("/costs", params={**WINDOW, "eff_by": "colour"})
    assert r.status_code == 400 and "group_by" in r.text


def test_the_overview_shows_this_months_gpu_efficiency(env):
    """This month (Jan 1 to now) holds every row above, the earlier usage hour too: paid 22
    GPU-h; used 0.5 + 1 + 1 = 2.5 (util) and 1 + 1 + 1 = 3 (busy). By hand: 11% and 14%."""
    import re

    env.client.post("/login", data={"token": env.tokens["viewer"], "next": "/"})
    page = env.client.get("/").text
    tile = page[page.index('id="tile-efficiency"') :]
    assert re.search(r'id="efficiency-util">11%<', tile)
    assert re.search(r'id="efficiency-busy">14%<', tile)
    assert "22.0 GPU-h paid" in tile
