"""Every console page on the demo's data, compared with the API for the same query.

The store is the demo's, once stopped, served with a clock frozen at the demo's last simulated
instant (`finished` in conftest): every date on the pages and in the queries below comes from that
clock or from the API's answers, none from the wall clock.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from datetime import datetime
from decimal import Decimal

import pytest

from tests.browser.conftest import REPO, Console, Served, api

# Generous: the session fixtures start, run and stop the demo on a possibly loaded machine.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

PAGES = (
    "/", "/costs", "/budgets", "/decisions", "/jobs", "/instances", "/gpus", "/iac", "/whatif",
)  # fmt: skip


@pytest.fixture
def viewer(browser, finished: Served):
    c = Console(browser, finished.url)
    c.sign_in(finished.viewer)
    yield c
    assert c.errors == [], c.errors  # no error in the browser's console on any page visited
    c.close()


def _cells(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        selector + " tbody tr",
        "rows => rows.map(r => Array.from(r.cells)"
        ".map(td => td.dataset.usd ?? td.dataset.key ?? td.textContent.trim()))",
    )


def test_the_default_cost_window_is_this_month_by_the_controllers_clock(
    viewer: Console, finished: Served
):
    page = viewer.goto("/costs")
    now = api(finished.url, finished.viewer, "/v1/status")["now"]
    assert page.get_attribute("#cost-window", "data-to") == now
    assert page.get_attribute("#cost-window", "data-from") == now[:8] + "01T00:00:00Z"


def test_every_page_renders_the_demos_data_with_no_browser_error(browser, finished: Served):
    for role, token in (("viewer", finished.viewer), ("operator", finished.operator)):
        c = Console(browser, finished.url)
        try:
            c.sign_in(token)
            for path in PAGES:
                page = c.goto(path)
                assert page.locator("h1").count() == 1
                assert page.locator("nav a.active").count() == 1
                name = path.strip("/") or "overview"
                c.shot(f"{name}-{role}")
            # The operator's forms show for the operator only.
            page = c.goto("/")
            assert page.locator("#operator-actions").count() == (1 if role == "operator" else 0)
            assert c.errors == [], c.errors
        finally:
            c.close()


@pytest.mark.parametrize("key", ["team", "account", "pool", "cloud", "kind", "day"])
def test_cost_page_equals_the_api_for_the_same_query(viewer: Console, finished: Served, key):
    page = viewer.goto(f"/costs?group_by={key}&from={finished.first_day}")
    win = page.locator("#cost-window")
    f, t = win.get_attribute("data-from"), win.get_attribute("data-to")
    assert f == f"{finished.first_day}T00:00:00Z"
    # The window ends by default at the controller's clock (the demo's last instant), not wall time.
    assert t == api(finished.url, finished.viewer, "/v1/status")["now"]
    want = api(finished.url, finished.viewer, "/v1/costs", group_by=key, **{"from": f, "to": t})
    assert want["rows"], "the demo recorded no cost"
    shown = {row[0]: row[1] for row in _cells(page, "#cost-table")}
    assert shown == {str(r[key]): r["cost_usd"] for r in want["rows"]}
    assert page.get_attribute("#cost-total", "data-usd") == want["total_usd"]
    # The table's rows add up to the total shown (hand sum, outside the product).
    assert sum(Decimal(v) for v in shown.values()) == Decimal(want["total_usd"])
    # The chart got one stack per key value and drew without error.
    chart = json.loads(page.inner_text("#cost-data"))
    if key != "day":
        # rows that nothing owns are named in the legend, never an empty label
        assert {s["label"] for s in chart["datasets"]} == {k or "(unattributed)" for k in shown}
    assert page.locator("#cost-chart").bounding_box()["height"] > 100


def test_cloud_and_onprem_sit_side_by_side_and_downloads_match(viewer: Console, finished: Served):
    page = viewer.goto(f"/costs?group_by=kind&from={finished.first_day}")
    f = page.get_attribute("#cost-window", "data-from")
    t = page.get_attribute("#cost-window", "data-to")
    by_kind = api(
        finished.url, finished.viewer, "/v1/costs", group_by="kind", **{"from": f, "to": t}
    )
    kinds = {r["kind"]: Decimal(r["cost_usd"]) for r in by_kind["rows"]}
    # the cloud kinds: job, idle, and time with no Slurm node behind it (unbound, orphan)
    cloud = sum(
        (kinds.get(k, Decimal(0)) for k in ("job", "idle", "unbound", "orphan")), Decimal(0)
    )
    onprem = kinds.get("onprem", Decimal(0)) + kinds.get("energy", Decimal(0))
    assert cloud > 0 and onprem > 0, kinds
    assert page.inner_text("#cost-cloud") == f"${cloud:,.2f}"
    assert page.inner_text("#cost-onprem") == f"${onprem:,.2f}"
    # each kind's row names its side: time before a node joins Slurm and orphans are cloud money
    sides = {row[0]: row[1] for row in _cells(page, "#kind-table")}
    cloud_kinds = ("job", "idle", "unbound", "orphan")
    assert sides == {k: "cloud" if k in cloud_kinds else "on-prem" for k in kinds}

    with page.expect_download() as dl:
        page.click("#download-csv")
    got = dl.value.path().read_text()
    import httpx

    want = httpx.get(
        f"{finished.url}/v1/costs",
        params={"group_by": "kind", "from": f, "to": t, "format": "csv"},
        headers={"Authorization": f"Bearer {finished.viewer}"},
        timeout=60,
    ).text
    assert got == want

    with page.expect_download() as dl:
        page.click("#download-focus")
    rows = list(csv.DictReader(io.StringIO(dl.value.path().read_text())))
    assert rows and all(r["BillingCurrency"] == "USD" for r in rows)
    assert {r["x_CostKind"] for r in rows} == set(kinds)
    # The FOCUS rows of the window add up to the window's total (hand sum of BilledCost).
    assert sum(Decimal(r["BilledCost"]) for r in rows) == cloud + onprem


def test_the_demos_focus_export_passes_both_validators(viewer: Console, finished: Served, tmp_path):
    """The console's FOCUS download of the demo: focus-validator 2.2.1 (FOCUS 1.2 rules) fails
    nothing but the model's self-contradicting InvoiceId-C-005-C; 1.0.0 fails nothing."""
    from focus_check import (
        require_validator,
        require_validator_1_2,
        validate_focus,
        validate_focus_1_2,
        validator_site,
    )

    page = viewer.goto(f"/costs?from={finished.first_day}")
    with page.expect_download() as dl:
        page.click("#download-focus")
    data = tmp_path / "focus.csv"
    data.write_text(dl.value.path().read_text())
    counts = validate_focus_1_2(require_validator_1_2(), data, tmp_path / "r12.xml")
    assert counts["tests"] == 578 and counts["passed"] >= 130
    exe = require_validator()
    validate_focus(exe, data, tmp_path / "r10.xml", validator_site(exe))


def test_budget_page_equals_the_api(viewer: Console, finished: Served):
    page = viewer.goto("/budgets")
    want = api(finished.url, finished.viewer, "/v1/budgets")
    assert want["teams"], "the demo has no team budget"
    for t in want["teams"]:
        row = page.locator(f"#budget-table tr[data-team='{t['team']}']")
        for field in ("spent_usd", "forecast_usd", "headroom_usd", "burn_usd_hr", "monthly_usd"):
            shown = row.locator(f"td[data-field={field}]").get_attribute("data-usd")
            assert shown == (t[field] or ""), (t["team"], field)
    # The trajectory covers the month; its last actual point is each team's spend so far and
    # its last forecast point the API's forecast.
    chart = json.loads(page.inner_text("#budget-data"))
    assert chart["labels"][0] == want["month_start"][:10]
    assert len(chart["labels"]) >= 28
    teams = {t["team"]: t for t in want["teams"]}
    for s in chart["datasets"]:
        actual = [v for v in s["data"] if v is not None]
        spent = Decimal(teams[s["label"]]["spent_usd"])
        assert abs(Decimal(repr(actual[-1])) - spent) < Decimal("0.01")
        forecast = Decimal(teams[s["label"]]["forecast_usd"])
        assert abs(Decimal(repr(s["forecast"][-1])) - forecast) < Decimal("0.01")


def test_decisions_page_lists_and_filters_like_the_api(viewer: Console, finished: Served):
    page = viewer.goto("/decisions")
    want = api(finished.url, finished.viewer, "/v1/decisions", limit=50)  # the first page
    shown = page.eval_on_selector_all(
        "#decision-table tr[data-decision]", "rows => rows.map(r => r.dataset.decision)"
    )
    assert shown == [d["decision_id"] for d in want]
    burst = next(d for d in want if d["reason"].startswith("burst"))
    # Filter by reason (the form, as a person would).
    page.select_option("#filter-reason", burst["reason"])
    with page.expect_navigation():
        page.click("#decision-filters button")
    only = api(finished.url, finished.viewer, "/v1/decisions", reason=burst["reason"], limit=50)
    shown = page.eval_on_selector_all(
        "#decision-table tr[data-decision]", "rows => rows.map(r => r.dataset.decision)"
    )
    assert shown == [d["decision_id"] for d in only]
    row = page.locator(f"tr[data-decision='{burst['decision_id']}']")
    assert "waiting budget" in row.inner_text() or "urgent" in row.inner_text()
    # The alternatives are listed with their $/h.
    assert "/h" in page.locator("tr.alts").first.inner_text()
    # Filter by job.
    job = burst["job_ids"][0]
    page = viewer.goto(f"/decisions?job={job}")
    shown = page.eval_on_selector_all(
        "#decision-table tr[data-decision]", "rows => rows.map(r => r.dataset.decision)"
    )
    everything = api(finished.url, finished.viewer, "/v1/decisions", limit=1000)
    assert shown == [d["decision_id"] for d in everything if job in d["job_ids"]][: len(shown)]
    assert burst["decision_id"] in shown


def _page_to(page, row: str) -> None:
    """Follow the pager's "older" link until `row` is on the page (and say so when it is on
    none, rather than time out on a link that is not there)."""
    while page.locator(row).count() == 0:
        if page.locator(".page-next").count() == 0:
            pytest.fail(f"{row} is on no page of {page.url}")
        with page.expect_navigation():
            page.locator(".page-next").first.click()


def _stored_instances(finished: Served) -> set[str]:
    return {i["instance_id"] for i in api(finished.url, finished.viewer, "/v1/instances",
                                          limit=1000)}  # fmt: skip


def _all_pages(page, selector: str, attr: str) -> list[str]:
    """The rows of every page, following the pager's "older" link as a person would."""
    seen: list[str] = []
    while True:
        seen += page.eval_on_selector_all(selector, f"rows => rows.map(r => r.dataset.{attr})")
        if page.locator(".page-next").count() == 0:
            return seen
        with page.expect_navigation():
            page.locator(".page-next").first.click()


def test_instances_page_shows_each_lifecycle_and_its_cost(viewer: Console, finished: Served):
    page = viewer.goto("/instances")
    want = api(finished.url, finished.viewer, "/v1/instances", limit=1000)
    assert want
    # every instance once, newest launch first, over the pages the pager links
    listed = _all_pages(page, "#instance-table tr[data-instance]", "instance")
    assert listed == [i["instance_id"] for i in reversed(want)]
    assert int(page.get_attribute("#instance-totals", "data-count")) == len(want)
    for inst in want[-50:]:  # the first page's
        row = page.locator(f"tr[data-instance='{inst['instance_id']}']")
        assert row.count() == 1
        # One timeline segment per state the instance went through.
        assert row.locator(".seg").count() == len(inst["history"])
        # Cost: hourly price x billed seconds (computed here by hand from the API's figures).
        cost = Decimal(inst["price_usd_hr"]) * Decimal(repr(inst["billed_seconds"])) / 3600
        shown = row.locator("td[data-field=cost_usd]").get_attribute("data-usd")
        assert shown == f"{cost:.2f}"
    ended = [i for i in want if i["state"] == "terminated"]
    assert ended and ended[0]["history"][0]["to"] == "requested"


def test_gpu_page_equals_the_api(viewer: Console, finished: Served):
    page = viewer.goto("/gpus")
    waste = api(finished.url, finished.viewer, "/v1/gpus/waste")
    alerts = api(finished.url, finished.viewer, "/v1/gpus/alerts")
    assert page.inner_text("#waste-gpus") == str(waste["gpus"])
    assert page.inner_text("#alert-count") == str(len(alerts["alerts"]))
    telemetry = api(finished.url, finished.viewer, "/v1/telemetry")
    assert telemetry, "the demo's nodes pushed no GPU sample"
    rows = page.locator("#gpu-table tbody tr[data-node]:not([data-unsampled])")
    assert rows.count() == sum(len(t["gpus"]) for t in telemetry)
    # every GPU paid for: the live instances' GPUs are on the page too, sampled or not
    live = [
        i
        for i in api(finished.url, finished.viewer, "/v1/instances", limit=1000)
        if i["state"] not in ("terminated", "failed")
    ]
    cloud = page.locator("#gpu-table tbody[data-kind=cloud] tr[data-node]")
    assert cloud.count() == sum(i["gpus"] for i in live)
    assert page.get_attribute("#fleet-summary", "data-cloud") == str(sum(i["gpus"] for i in live))
    for t in telemetry:
        for g in t["gpus"]:
            cell = page.locator(
                f"tr[data-node='{t['node']}'][data-gpu='{g['index']}'] td[data-field=util_pct]"
            )
            assert cell.inner_text() == f"{g['util_pct']}%"


def test_iac_page_renders_the_stored_reviews(viewer: Console, finished: Served):
    page = viewer.goto("/iac")
    decisions = api(finished.url, finished.viewer, "/v1/decisions", limit=1000)
    reviewed = [d for d in decisions if d["iac_review"]]
    assert reviewed, "the demo stored no IaC review"
    for d in reviewed:
        card = page.locator(f".iac-review[data-decision='{d['decision_id']}']")
        assert card.count() == 1
        body = json.loads(d["iac_review"]["body"])
        assert card.locator("[data-field=verdict]").inner_text() == body["verdict"]
        text = card.inner_text()
        for res in body["pools"][0]["resources"]:
            assert res["name"] in text  # the diff lists every resource
        for pol in body["policies"]:
            assert pol["name"] in text  # and every policy's verdict
        # each rule's verdict on the reviewed pool, as the review says it: a rule that reads
        # none of the pool's resources (a GCE-only rule on an AWS pool) is "not applicable"
        (own,) = [p for p in body["pools"] if p["name"] == body["pool"]]
        said = {v["policy"]: v["verdict"] for v in own["policy_verdicts"]}
        for pol in body["policies"]:
            cell = card.locator(f"tr[data-policy='{pol['name']}'] [data-field=policy-verdict]")
            shown = {"fail": "mandatory"}.get(said[pol["name"]], said[pol["name"]])
            assert cell.inner_text().startswith(shown), (pol["name"], cell.inner_text())
        assert said["gpu-terminate-on-host-maintenance"] == "not applicable"  # an AWS pool


def test_what_if_loads_the_simulator_json(viewer: Console, tmp_path):
    out = tmp_path / "sim.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "provisioner.cli",
            "simulate",
            "--onprem-gpus",
            "64",
            "--policy",
            "default",
            "--policy",
            "never",
            "--policy",
            "immediate",
            "--json",
            str(out),
            "--no-progress",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=600,
    )
    results = json.loads(out.read_text())
    page = viewer.goto("/whatif")
    page.set_input_files("#whatif-file", str(out))
    page.wait_for_selector("body[data-whatif='loaded']")
    policies = page.eval_on_selector_all(
        "#whatif-table tbody tr", "rows => rows.map(r => r.dataset.policy)"
    )
    assert policies == [r["policy"] for r in results]
    cost = page.locator("#whatif-table tbody tr").first.locator("td").nth(2).inner_text()
    assert cost == f"${results[0]['cloud_cost_usd']:,.2f}"
    # The simulator wrote each policy's cloud GPUs over time: they are charted as such.
    assert any(r["cloud_gpus_over_time"] for r in results)
    assert page.inner_text("#whatif-gpus-title") == "Cloud GPUs over time"
    viewer.shot("whatif-loaded")
    # The bundled example (the same command's output, shipped with the console) loads too.
    page.click("#whatif-example")
    page.wait_for_selector("body[data-whatif='example']")
    example = json.loads((REPO / "provisioner/api/console/static/whatif-example.json").read_text())
    policies = page.eval_on_selector_all(
        "#whatif-table tbody tr", "rows => rows.map(r => r.dataset.policy)"
    )
    assert policies == [r["policy"] for r in example]
    viewer.shot("whatif-example")
    # A wrong file is refused with its name in the message.
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a simulation"}')
    page.set_input_files("#whatif-file", str(bad))
    page.wait_for_selector("#whatif-error:not([hidden])")
    assert "bad.json" in page.inner_text("#whatif-error")


def test_a_clouds_refusal_shows_on_the_decisions_page_as_an_alert_in_its_own_words(
    viewer: Console, finished: Served
):
    """A permission denial (the pool paused) and a late launch failure, as the controller
    records them: the page marks the alert and shows the cloud's code and message."""
    from provisioner.domain.plan import Decision, ReasonCode

    now = datetime.fromisoformat(finished.now.replace("Z", "+00:00")).timestamp()
    words = "You are not authorized to perform this operation."
    paused = Decision(
        "d-browser-paused",
        ReasonCode.POOL_PAUSED,
        pool="aws-a100",
        detail={"code": "auth:UnauthorizedOperation", "error": words, "alert": "true"},
    )
    late = Decision(
        "d-browser-late",
        ReasonCode.LAUNCH_FAILED,
        pool="aws-a100",
        detail={"code": "capacity:InsufficientInstanceCapacity", "error": "no capacity"},
    )
    finished.store.record_decisions([paused, late], now)
    page = viewer.goto("/decisions?reason=pool_paused")
    row = page.locator("tr[data-decision='d-browser-paused']")
    assert row.locator("[data-alert]").count() == 1
    text = row.inner_text()
    assert "auth:UnauthorizedOperation" in text and words in text
    assert "takes no new nodes" in text  # the reason, in words
    page = viewer.goto("/decisions?reason=launch_failed")
    row = page.locator("tr[data-decision='d-browser-late']")
    assert row.locator("[data-alert]").count() == 0  # capacity: no alert
    assert "no capacity" in row.inner_text()


def test_the_jobs_page_shows_the_tables_jobs_with_their_ledger_dollars(
    viewer: Console, finished: Served
):
    """Issue 33: the Jobs page lists what `GET /v1/jobs` lists, filtered the same way; each
    cloud job's dollars are the sum of its own ledger rows (read from the store, summed here),
    and its decision is one the controller recorded."""
    page = viewer.goto("/jobs?where=cloud")
    want = api(finished.url, finished.viewer, "/v1/jobs", where="cloud", limit=50)  # page 1
    assert want, "the demo ran no job in the cloud"
    shown = page.eval_on_selector_all(
        "#job-table tbody tr",
        "rows => rows.map(r => [r.dataset.job, "
        "r.querySelector('[data-field=cost_usd]').dataset.usd])",
    )
    assert [job for job, _ in shown] == [j["job_id"] for j in want]
    for (job, usd), j in zip(shown, want, strict=True):
        rows = finished.store.ledger_entries(job_id=job)
        assert Decimal(usd) == sum((e.cost for e in rows), Decimal(0)), job
        assert j["where"] == "cloud" and j["instance_ids"]
        for d in j["decision_ids"]:
            assert api(finished.url, finished.viewer, f"/v1/decisions/{d}")["decision_id"] == d
    assert int(page.inner_text("#job-count")) == len(want)
    # drill-down: an instance's "jobs" link lists the jobs that ran on it, as the API does
    # (an instance the store holds: the jobs table may name one a pass saw only in the listing)
    stored = _stored_instances(finished)
    first = next(j for j in want if any(i in stored for i in j["instance_ids"]))
    iid = next(i for i in first["instance_ids"] if i in stored)
    page = viewer.goto("/instances")
    _page_to(page, f"tr[data-instance='{iid}']")
    with page.expect_navigation():
        page.click(f"tr[data-instance='{iid}'] a[data-field=jobs-link]")
    ran = api(finished.url, finished.viewer, "/v1/jobs", ran_on=iid, limit=50)
    listed = page.eval_on_selector_all(
        "#job-table tbody tr", "rows => rows.map(r => r.dataset.job)"
    )
    assert listed == [j["job_id"] for j in ran] and first["job_id"] in listed
    assert all(iid in j["instance_ids"] for j in ran)
    page = viewer.goto("/jobs?state=pending")
    states = page.eval_on_selector_all(
        "#job-table tbody tr td .state", "s => s.map(x => x.textContent)"
    )
    assert set(states) <= {"pending"}


def test_a_team_has_one_colour_on_every_page(viewer: Console, finished: Served):
    """The Costs chart (by team) and the Budgets trajectory draw each team in the same colour,
    read from the charts Chart.js drew; two teams never share one."""

    def colours(path: str, canvas: str) -> dict[str, str]:
        page = viewer.goto(path)
        page.wait_for_function(f"() => Chart.getChart(document.querySelector('{canvas}'))")
        got = page.evaluate(
            f"() => Chart.getChart(document.querySelector('{canvas}')).data.datasets"
            ".map(d => [d.label, d.borderColor || d.backgroundColor])"
        )
        return {label: c for label, c in got}

    costs = colours(f"/costs?group_by=team&from={finished.first_day}", "#cost-chart")
    budgets = colours("/budgets", "#budget-chart")
    both = {t for t in costs if t in budgets and t != "(unattributed)"}
    assert both, (costs, budgets)
    for team in both:
        assert costs[team] == budgets[team], team
    named = [c for t, c in costs.items() if t != "(unattributed)"]
    assert len(set(named)) == len(named)  # one colour per team


def test_drill_down_from_a_team_to_a_job_to_its_instance_and_back(
    viewer: Console, finished: Served
):
    """Team (the Costs page's efficiency card) -> its jobs -> a cloud job's page -> the
    instance it ran on -> that instance's jobs, and back. On each page the ledger rows listed
    add up to the dollars shown (summed here), the job's dollars are its own ledger rows (read
    from the store), and the instance's bill is its price x billed seconds (from the API)."""
    cloud = api(finished.url, finished.viewer, "/v1/jobs", where="cloud", limit=1000)
    assert cloud, "the demo ran no job in the cloud"
    eff = api(finished.url, finished.viewer, "/v1/efficiency", group_by="team",
              **{"from": finished.first_day})  # fmt: skip
    teams = {r["key"] for r in eff["rows"] if r["key"]}  # the card links these
    stored = _stored_instances(finished)
    reachable = [j for j in cloud if j["team"] in teams and j["instance_ids"][0] in stored]
    assert reachable, (teams, [(j["job_id"], j["team"], j["instance_ids"]) for j in cloud[:5]])
    # the dearest (a short demo may not have billed its running jobs yet: then $0 on both sides)
    job = max(reachable, key=lambda j: (Decimal(j["cost_usd"]), j["job_id"]))
    page = viewer.goto(f"/costs?from={finished.first_day}&eff_by=team")
    with page.expect_navigation():
        page.click(f"#efficiency-table tr[data-key='{job['team']}'] a")
    assert f"team={job['team']}" in page.url
    _page_to(page, f"tr[data-job='{job['job_id']}']")
    with page.expect_navigation():
        page.click(f"tr[data-job='{job['job_id']}'] a[data-field=job-link]")

    def ledger_sum() -> Decimal:
        cells = page.eval_on_selector_all(
            "#ledger-table tbody tr:not(.total) td[data-usd]", "tds => tds.map(t => t.dataset.usd)"
        )
        return sum((Decimal(c) for c in cells), Decimal(0))

    shown = Decimal(page.get_attribute("#job-cost", "data-usd"))
    own = sum((e.cost for e in finished.store.ledger_entries(job_id=job["job_id"])), Decimal(0))
    assert shown == own == ledger_sum() == Decimal(job["cost_usd"])
    iid = job["instance_ids"][0]
    with page.expect_navigation():
        page.click(f"a[data-field=instance-link]:has-text('{iid}')")
    inst = api(finished.url, finished.viewer, f"/v1/instances/{iid}")
    bill = Decimal(inst["price_usd_hr"]) * Decimal(repr(inst["billed_seconds"])) / 3600
    # the API rounds billed seconds to the millisecond: within that, and the micro-dollar
    slack = Decimal(inst["price_usd_hr"]) * Decimal("0.0005") / 3600 + Decimal("0.000001")
    assert abs(Decimal(page.get_attribute("#instance-billed", "data-usd")) - bill) <= slack
    assert ledger_sum() == Decimal(page.get_attribute("#ledger-total", "data-usd"))
    assert page.locator("#lifecycle-table tbody tr").count() == len(inst["history"])
    assert page.locator(f"#instance-job-list a:has-text('{job['job_id']}')").count() == 1
    with page.expect_navigation():
        page.click("#back-to-pool")
    assert page.locator(f"tr[data-instance='{iid}']").count() in (0, 1)  # it may be on page 2
    assert "pool=" in page.url


def _ledger_rows_sum(page) -> Decimal:
    """The ledger page's listed rows, over every page its pager links, added up."""
    total = Decimal(0)
    while True:
        cells = page.eval_on_selector_all(
            "#ledger-table tbody td[data-usd]", "cells => cells.map(c => c.dataset.usd)"
        )
        total += sum((Decimal(v) for v in cells), Decimal(0))
        if page.locator(".page-next").count() == 0:
            return total
        with page.expect_navigation():
            page.locator(".page-next").first.click()
        page.wait_for_selector("body[data-ready='1']")


@pytest.mark.parametrize("path", ["/costs?group_by=team", "/costs?group_by=node", "/budgets"])
def test_every_money_figure_links_to_rows_that_add_up_to_it(
    viewer: Console, finished: Served, path
):
    """Each linked figure on a money page, followed in the browser: the linked page's total
    equals the figure, and the rows it lists (page after page) add up to that total."""
    sep = "&" if "?" in path else "?"
    page = viewer.goto(path + (f"{sep}from={finished.first_day}" if "costs" in path else ""))
    links = page.eval_on_selector_all(
        "td[data-usd] a[href^='/ledger'], .tile .value a[href^='/ledger']",
        "as => as.map(a => [a.closest('[data-usd]') ? a.closest('[data-usd]').dataset.usd"
        " : a.textContent, a.getAttribute('href')])",
    )
    assert len(links) >= 3, path
    for figure, href in links:
        linked = viewer.goto(href)
        total = Decimal(linked.get_attribute("#ledger-sum", "data-usd"))
        if figure.startswith("$"):  # a tile: shown to the cent
            assert f"${total:,.2f}" == figure.strip(), href
        else:
            assert total == Decimal(figure), href
        assert _ledger_rows_sum(linked) == total, href
    viewer.shot(f"ledger-from-{path.strip('/').split('?')[0]}")


def test_a_jobs_dollars_link_to_its_own_ledger_rows(viewer: Console, finished: Served):
    page = viewer.goto("/jobs?where=cloud")
    links = page.eval_on_selector_all(
        "td[data-field=cost_usd] a",
        "as => as.map(a => [a.closest('td').dataset.usd, a.getAttribute('href')])",
    )
    assert links, "the demo ran no job in the cloud"
    for usd, href in links[:10]:
        job = viewer.goto(href)
        if job.locator("#ledger-total").count() == 0:  # not billed yet: "No ledger row yet."
            assert Decimal(usd) == 0, href
            continue
        rows = job.eval_on_selector_all(
            "#ledger-table tbody td[data-usd]:not(#ledger-total)",
            "cells => cells.map(c => c.dataset.usd)",
        )
        total = job.get_attribute("#ledger-total", "data-usd")
        assert Decimal(total) == Decimal(usd), href
        assert sum(Decimal(v) for v in rows) == Decimal(total), href
