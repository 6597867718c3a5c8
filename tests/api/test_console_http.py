"""The web console over HTTP (no browser): sign-in, cookie flags, roles, CSRF, every page, and
the figures a page shows against the JSON API's for the same query."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from api_helpers import Env

PAGES = (
    "/",
    "/costs",
    "/ledger",
    "/budgets",
    "/decisions",
    "/instances",
    "/gpus",
    "/iac",
    "/whatif",
)


def sign_in(env: Env, role: str) -> str:
    env.client.cookies.clear()
    r = env.client.post(
        "/login", data={"token": env.tokens[role], "next": "/"}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    return r.headers["set-cookie"]


def csrf_of(env: Env) -> str:
    page = env.client.get("/").text
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m
    return m.group(1)


@pytest.mark.parametrize("path", PAGES)
def test_pages_need_a_session(env: Env, path):
    env.client.cookies.clear()
    r = env.client.get(path, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
    # A bearer token in a header does not open pages: the console is cookie-only.
    r = env.client.get(
        path, headers={"Authorization": f"Bearer {env.tokens['admin']}"}, follow_redirects=False
    )
    assert r.status_code == 303


def test_sign_in_sets_an_httponly_strict_cookie_and_never_echoes_the_token(env: Env):
    cookie = sign_in(env, "viewer")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert env.tokens["viewer"] not in cookie
    page = env.client.get("/")
    assert page.status_code == 200 and env.tokens["viewer"] not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]


@pytest.mark.parametrize("role", ["revoked", "nonsense"])
def test_bad_tokens_are_refused(env: Env, role):
    env.client.cookies.clear()
    token = env.tokens.get(role, "pbt_0123456789ab_" + "x" * 30)
    r = env.client.post("/login", data={"token": token}, follow_redirects=False)
    assert r.status_code == 200 and "not valid" in r.text and 'id="login-form"' in r.text
    assert "set-cookie" not in r.headers


def test_sign_in_never_redirects_off_site(env: Env):
    env.client.cookies.clear()
    r = env.client.post(
        "/login",
        data={"token": env.tokens["viewer"], "next": "//evil.example/x"},
        follow_redirects=False,
    )
    assert r.headers["location"] == "/"


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_for_a_viewer(env: Env, path):
    sign_in(env, "viewer")
    r = env.client.get(path)
    assert r.status_code == 200, r.text[:2000]
    assert "<h1>" in r.text
    assert 'id="operator-actions"' not in r.text


def test_viewer_cannot_pause_even_with_its_csrf_token(fresh: Env):
    sign_in(fresh, "viewer")
    r = fresh.client.post("/actions/pause", data={"csrf": csrf_of(fresh)}, follow_redirects=False)
    assert r.status_code == 403
    assert fresh.store.operator_state().paused is False


def test_operator_pause_needs_the_csrf_token(fresh: Env):
    sign_in(fresh, "operator")
    assert 'id="operator-actions"' in fresh.client.get("/").text
    r = fresh.client.post("/actions/pause", data={"reason": "x"}, follow_redirects=False)
    assert r.status_code == 403
    r = fresh.client.post(
        "/actions/pause", data={"csrf": "wrong", "reason": "x"}, follow_redirects=False
    )
    assert r.status_code == 403
    assert fresh.store.operator_state().paused is False
    r = fresh.client.post(
        "/actions/pause",
        data={"csrf": csrf_of(fresh), "reason": "maintenance"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    state = fresh.store.operator_state()
    assert state.paused and state.reason == "maintenance" and "operator-bot" in state.updated_by
    assert "Paused" in fresh.client.get("/").text
    r = fresh.client.post("/actions/resume", data={"csrf": csrf_of(fresh)}, follow_redirects=False)
    assert r.status_code == 303 and fresh.store.operator_state().paused is False


def test_operator_drains_and_undrains_a_pool(fresh: Env):
    sign_in(fresh, "operator")
    pool = fresh.store.pools()[0].name
    csrf = csrf_of(fresh)
    r = fresh.client.post(f"/actions/pools/{pool}/drain", data={"csrf": csrf})
    assert r.status_code == 200  # followed the redirect to the overview
    assert fresh.store.pool(pool).drained is True
    fresh.client.post(f"/actions/pools/{pool}/undrain", data={"csrf": csrf})
    assert fresh.store.pool(pool).drained is False
    r = fresh.client.post("/actions/pools/nope/drain", data={"csrf": csrf})
    assert r.status_code == 404


def test_revoking_the_token_ends_its_sessions(fresh: Env):
    sign_in(fresh, "viewer")
    assert fresh.client.get("/", follow_redirects=False).status_code == 200
    token_id = fresh.tokens["viewer"].split("_")[1]
    fresh.store.revoke_token(token_id, 1.0)
    assert fresh.client.get("/", follow_redirects=False).status_code == 303


def test_sign_out_needs_csrf_and_ends_the_session(fresh: Env):
    sign_in(fresh, "viewer")
    assert fresh.client.post("/logout", data={}).status_code == 403
    r = fresh.client.post("/logout", data={"csrf": csrf_of(fresh)}, follow_redirects=False)
    assert r.status_code == 303
    assert fresh.client.get("/", follow_redirects=False).status_code == 303


def test_cost_page_shows_the_apis_figures(env: Env):
    sign_in(env, "viewer")
    h = {"Authorization": f"Bearer {env.tokens['viewer']}"}
    for key in ("team", "kind", "pool", "day"):
        page = env.client.get("/costs", params={"group_by": key}).text
        f = re.search(r'data-from="([^"]+)"', page).group(1)
        t = re.search(r'data-to="([^"]+)"', page).group(1)
        api = env.client.get(
            "/v1/costs", params={"group_by": key, "from": f, "to": t}, headers=h
        ).json()
        shown = re.findall(
            r'<td class="key" data-key="([^"]*)">[^<]*</td><td class="num" data-usd="([^"]+)"', page
        )
        assert shown == [(str(r[key]), r["cost_usd"]) for r in api["rows"]]
        assert f'data-usd="{api["total_usd"]}"' in page
        assert sum(Decimal(v) for _, v in shown) == Decimal(api["total_usd"])


def test_cost_page_reports_bad_parameters(env: Env):
    sign_in(env, "viewer")
    r = env.client.get("/costs", params={"group_by": "colour"})
    assert r.status_code == 400 and "group_by" in r.text
    r = env.client.get("/costs", params={"from": "yesterday"})
    assert r.status_code == 400 and "from" in r.text


def test_csv_download_equals_the_api_csv(env: Env):
    sign_in(env, "viewer")
    h = {"Authorization": f"Bearer {env.tokens['viewer']}"}
    q = {"group_by": "team,kind", "from": "2020-01-01", "to": "2100-01-01"}
    got = env.client.get("/costs.csv", params=q)
    want = env.client.get("/v1/costs", params={**q, "format": "csv"}, headers=h)
    assert got.status_code == 200 and got.text == want.text
    focus = env.client.get("/focus.csv")
    assert focus.status_code == 200 and focus.text.startswith("BilledCost,")


def test_iac_review_page_shows_the_stored_review(env: Env):
    sign_in(env, "viewer")
    page = env.client.get("/iac").text
    assert "aws:autoscaling:Group burst-aws-a100" in page and 'data-decision="d-1"' in page


def test_static_assets_are_served_with_their_licences(env: Env):
    for path in (
        "/static/vendor/chart-4.6.1.umd.min.js",
        "/static/vendor/htmx-2.0.11.min.js",
        "/static/vendor/chart-4.6.1.LICENSE.md",
        "/static/vendor/htmx-2.0.11.LICENSE",
        "/static/console.js",
        "/static/console.css",
    ):
        r = env.client.get(path)
        assert r.status_code == 200 and len(r.content) > 500, path


def test_overview_shows_who_uses_the_onprem_gpus_with_their_nvml_load(db_url):
    """Per team and project: GPUs allocated by Slurm (on-prem jobs only) and the mean NVML load
    of the GPUs their processes run on; expected figures computed here by hand."""
    from datetime import UTC, datetime

    from api_helpers import NOW, POLICY
    from fastapi.testclient import TestClient

    from provisioner.api.app import ApiDeps, create_app
    from provisioner.api.auth import create_token
    from provisioner.clock import ManualClock
    from provisioner.domain.jobs import Job, JobState
    from provisioner.domain.nodes import Node, NodeKind, NodeState
    from provisioner.domain.snapshot import ClusterSnapshot
    from provisioner.domain.telemetry import GpuReading, GpuTelemetry
    from provisioner.observe.telemetry_ingest import record_payload
    from provisioner.store import Store

    store = Store(db_url)
    run = dict(state=JobState.RUNNING, start_ts=NOW - 100)
    snap = ClusterSnapshot(
        taken_ts=NOW,
        jobs=(
            Job("1", 4, NOW - 500, account="vision", nodes=("gpu-01",), **run),
            Job("2", 2, NOW - 500, account="vision", nodes=("gpu-01",), **run),
            Job("3", 8, NOW - 500, account="nlp", nodes=("gpu-02",), **run),
            Job("4", 8, NOW - 500, account="nlp", nodes=("cloud-1",), **run),  # not on-prem
            Job("5", 2, NOW - 900, account="nlp"),  # pending
        ),
        nodes=(
            Node("gpu-01", NodeKind.ONPREM, 8, 6, state=NodeState.MIXED),
            Node("gpu-02", NodeKind.ONPREM, 8, 8, state=NodeState.ALLOCATED),
            Node("cloud-1", NodeKind.BURST, 8, 8, state=NodeState.ALLOCATED),
        ),
    )
    utils = {0: (90.0, "1"), 1: (70.0, "1"), 2: (10.0, "2")}
    payload = GpuTelemetry(
        node="gpu-01",
        sampled_ts=NOW - 5,
        gpus=tuple(
            GpuReading(index=i, uuid=f"GPU-{i}", util_pct=u, jobs=(j,))
            for i, (u, j) in utils.items()
        ),
    )
    store.upsert_telemetry("gpu-01", payload.to_gpu_samples(), NOW)
    record_payload(store, payload, NOW, POLICY)
    deps = ApiDeps(
        store=store,
        clock=ManualClock(datetime.fromtimestamp(NOW, UTC)),
        snapshot=lambda: snap,
        policy=POLICY,
    )
    client = TestClient(create_app(deps))
    token = create_token(store, "viewer", "v", NOW)
    client.post("/login", data={"token": token})
    page = client.get("/").text
    teams = re.findall(
        r'<tr data-team="([^"]+)"><td>[^<]*</td><td class="num" data-field="gpus">(\d+)</td>'
        r'<td class="num">([^<]*)</td>',
        page,
    )
    # vision: jobs 1 (4 GPUs) + 2 (2 GPUs); load (90 + 70 + 10) / 3 = 56.7 %. nlp: job 3 only.
    assert teams == [("nlp", "8", "—"), ("vision", "6", "57%")]
    assert 'id="pending-jobs">1<' in page and 'id="pending-gpus">2<' in page
    assert 'id="onprem-alloc">14 / 16<' in page
    client.close()
    store.close()


def test_text_from_the_store_is_escaped(fresh: Env):
    sign_in(fresh, "operator")
    fresh.client.post(
        "/actions/pause", data={"csrf": csrf_of(fresh), "reason": "<script>alert(1)</script>"}
    )
    page = fresh.client.get("/").text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_cross_site_posts_are_refused(fresh: Env):
    r = fresh.client.post(
        "/login",
        data={"token": fresh.tokens["viewer"]},
        headers={"Origin": "http://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403 and "set-cookie" not in r.headers
    # a sandboxed frame on another site posts with `Origin: null`
    r = fresh.client.post(
        "/login",
        data={"token": fresh.tokens["viewer"]},
        headers={"Origin": "null"},
        follow_redirects=False,
    )
    assert r.status_code == 403 and "set-cookie" not in r.headers
    r = fresh.client.post(
        "/login",
        data={"token": fresh.tokens["viewer"]},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert r.status_code == 303


def overview_as_viewer(store) -> str:
    """The Overview page a viewer sees on `store`; the store is closed afterwards."""
    from api_helpers import make_env

    env = make_env(store)
    try:
        sign_in(env, "viewer")
        return env.client.get("/").text
    finally:
        env.client.close()
        store.close()


def test_overview_shows_the_cloud_waste_share_of_this_month(db_url):
    """Dollars on instances that never ran a job over all cloud dollars this month: i-1 ran a
    job ($1.50 of its $2.00), i-2 never did ($2.00 unbound, $1.00 idle); last month's rows and
    on-prem rows are not counted. By hand: $3.00 of $5.00 = 60.0%."""
    from api_helpers import NOW

    from provisioner.account.billing import month_start
    from provisioner.domain.records import LedgerEntry, LedgerKind
    from provisioner.store import Store

    store = Store(db_url)
    m0 = month_start(NOW)

    def row(start: float, cost: str, kind: LedgerKind, iid: str = "") -> LedgerEntry:
        return LedgerEntry(start, start + 60, kind, Decimal(cost), instance_id=iid)

    store.add_ledger(
        [
            row(NOW - 600, "1.50", LedgerKind.JOB, "i-1"),
            row(NOW - 540, "0.50", LedgerKind.IDLE, "i-1"),
            row(NOW - 600, "2.00", LedgerKind.UNBOUND, "i-2"),
            row(NOW - 540, "1.00", LedgerKind.IDLE, "i-2"),
            row(NOW - 600, "7.00", LedgerKind.ONPREM),
            row(m0 - 3600, "9.00", LedgerKind.UNBOUND, "i-0"),  # last month
        ]
    )
    page = overview_as_viewer(store)
    tile = page[page.index('id="tile-waste"') :]
    assert re.search(r'id="waste-share">60\.0%<', tile)
    assert "$3.00" in tile and "$5.00" in tile and "1 of 2 instance(s)" in tile


def test_budgets_committed_is_what_the_budget_guard_counted_at_the_last_pass(db_url):
    """Machines requested and not yet serving (a scale-up the cloud has not even listed yet
    among them) are in the pass's spend state; the page shows that figure per team, and says
    where it comes from. A standby with no pass says it read the store instead."""
    from dataclasses import replace

    from api_helpers import a_snapshot, make_env, seed

    from provisioner.domain.snapshot import SpendState
    from provisioner.store import Store

    store = Store(db_url)
    seed(store)
    spent = SpendState(team_committed_usd={"vision": Decimal("123.456789")})
    env = make_env(store)
    env.deps.snapshot = lambda: replace(a_snapshot(), spend=spent)
    try:
        sign_in(env, "viewer")
        page = env.client.get("/budgets").text
        row = page[page.index('data-team="vision"') :]
        cell = re.search(r'data-field="committed_usd" data-usd="([^"]+)">([^<]+)<', row)
        assert cell and Decimal(cell.group(1)) == Decimal("123.456789")
        assert cell.group(2) == "$123.46"
        assert "from the last pass&#39;s budget guard" in page
        env.deps.snapshot = None  # a standby: no pass
        page = env.client.get("/budgets").text
        assert "instances in flight in the store (no pass yet)" in page
    finally:
        env.client.close()
        store.close()


def _page_ids(html: str, attr: str) -> list[str]:
    return re.findall(rf'<tr {attr}="([^"]+)"', html)


def test_decisions_page_by_page_with_filters_and_clear_errors_past_the_end(db_url):
    """120 decisions (every third for nlp): pages of 50, newest first, the pager's links keep
    the filters, the pages together are every decision once; past the end and nonsense page
    numbers are a 400 that says why."""
    from dataclasses import replace

    from api_helpers import NOW, decision, make_env, seed

    from provisioner.store import Store

    store = Store(db_url)
    seed(store)
    made = [
        replace(decision(100 + i), team="nlp" if i % 3 == 0 else "vision", job_ids=(f"j{i}",))
        for i in range(120)
    ]
    for i, d in enumerate(made):
        store.record_decisions([d], NOW - 3000 + i)  # d-219 is the newest
    env = make_env(store)
    try:
        sign_in(env, "viewer")
        everything = [d.decision_id for d in reversed(made)] + ["d-1"]
        seen: list[str] = []
        url: str | None = "/decisions"
        while url:
            r = env.client.get(url)
            assert r.status_code == 200, r.text
            seen += _page_ids(r.text, "data-decision")
            nxt = re.search(r'href="\?([^"]*page=\d+)" rel="next"', r.text)
            url = "/decisions?" + nxt.group(1).replace("&amp;", "&") if nxt else None
        assert seen == everything  # 50 + 50 + 21, each once, newest first
        nlp = [d.decision_id for d in reversed(made) if d.team == "nlp"]  # 40 of them
        first = env.client.get("/decisions", params={"team": "nlp"}).text
        assert _page_ids(first, "data-decision") == nlp[:40]
        assert 'rel="next"' not in first  # 40 fit one page
        assert "team=nlp&amp;page=2" not in first
        r = env.client.get("/decisions", params={"page": "2"})
        assert "team=" not in re.search(r'href="\?([^"]*)" rel="prev"', r.text).group(1)
        for bad, words in (("4", "no more decisions"), ("0", "not a page number"),
                           ("x", "not a page number"), ("-1", "not a page number")):  # fmt: skip
            r = env.client.get("/decisions", params={"page": bad})
            assert r.status_code == 400 and words in r.text, (bad, r.text[-400:])
        r = env.client.get("/decisions", params={"team": "nlp", "page": "2"})
        assert r.status_code == 400 and "no more decisions" in r.text
    finally:
        env.client.close()
        store.close()


def test_instances_filter_total_and_link_to_their_jobs(db_url):
    """The page's totals are over every instance the filter matches; each row links to the
    jobs that ran on it. Expected figures by hand: seed's i-1 is live, $9.83/h."""
    from api_helpers import seed

    from provisioner.store import Store

    store = Store(db_url)
    seed(store)
    from api_helpers import make_env

    env = make_env(store)
    try:
        sign_in(env, "viewer")
        live = env.client.get("/instances", params={"state": "live"}).text
        assert _page_ids(live, "data-instance") == ["i-1"]
        assert 'data-count="1"' in live
        ended = env.client.get("/instances", params={"state": "ended"}).text
        assert _page_ids(ended, "data-instance") == [] and 'data-count="0"' in ended
        assert _page_ids(env.client.get("/instances", params={"pool": "gcp-a100"}).text,
                         "data-instance") == []  # fmt: skip
        (si,) = store.instances(live_only=True)
        want = Decimal("9.83") * Decimal(repr(si.billed_seconds)) / 3600
        assert f'data-usd="{want:.2f}"' in live
        assert 'href="/jobs?ran_on=i-1"' in live
        r = env.client.get("/instances", params={"state": "gone"})
        assert r.status_code == 400 and "state" in r.text
    finally:
        env.client.close()
        store.close()


def test_overview_leads_with_month_to_date_spend_against_the_budget(db_url):
    """Cloud kinds and on-prem kinds this month, hand-summed; last month's rows left out; the
    share is cloud over the teams' monthly budgets (seed: vision, $5,000)."""
    from api_helpers import NOW, seed

    from provisioner.account.billing import month_start
    from provisioner.domain.records import LedgerEntry, LedgerKind
    from provisioner.store import Store

    store = Store(db_url)
    seed(store)  # its own rows count too: read back and summed by hand below
    before = {
        k: sum(
            (
                e.cost
                for e in store.ledger_entries()
                if e.kind is k and e.start_ts >= month_start(NOW)
            ),
            Decimal(0),
        )
        for k in LedgerKind
    }
    m0 = month_start(NOW)
    store.add_ledger(
        [
            LedgerEntry(NOW - 600, NOW - 540, LedgerKind.JOB, Decimal("100.00"), instance_id="i-9"),
            LedgerEntry(
                NOW - 600, NOW - 540, LedgerKind.UNBOUND, Decimal("25.00"), instance_id="i-9"
            ),
            LedgerEntry(NOW - 600, NOW - 540, LedgerKind.ONPREM, Decimal("40.00")),
            LedgerEntry(NOW - 600, NOW - 540, LedgerKind.ENERGY, Decimal("2.50")),
            LedgerEntry(m0 - 3600, m0 - 3540, LedgerKind.JOB, Decimal("999.00"), instance_id="i-0"),
        ]
    )
    cloud = Decimal("125.00") + sum(
        (
            before[k]
            for k in (LedgerKind.JOB, LedgerKind.IDLE, LedgerKind.UNBOUND, LedgerKind.ORPHAN)
        ),
        Decimal(0),
    )
    onprem = Decimal("42.50") + before[LedgerKind.ONPREM] + before[LedgerKind.ENERGY]
    page = overview_as_viewer(store)
    tile = page[page.index('id="tile-month"') :]
    assert page.index('id="tile-month"') < page.index('id="tile-bursting"')  # it leads
    got = dict(re.findall(r'id="(month-[a-z]+)"[^>]*data-usd="([^"]+)"', tile))
    assert Decimal(got["month-cloud"]) == cloud and Decimal(got["month-onprem"]) == onprem
    assert Decimal(got["month-total"]) == cloud + onprem
    share = re.search(r'id="month-budget-share">(\d+)%<', tile)
    assert share and int(share.group(1)) == round(100 * cloud / Decimal(5000))


def test_gpus_page_lists_every_gpu_paid_for_onprem_and_cloud_by_node(db_url):
    """On-prem nodes from the snapshot, cloud nodes from the live instances (booting ones
    marked), each GPU once with its sample or "no sample"; a serving cloud node with no job
    counts as idle $/h. By hand: gpu-01 8 GPUs (3 sampled), cloud-1 i-1 8 GPUs at $9.83/h
    running job 4, cloud-2 i-2 booting at $4.10/h, cloud-3 i-3 serving with no job at $2.50/h."""
    from datetime import UTC, datetime

    from api_helpers import NOW, OFFER, POLICY
    from fastapi.testclient import TestClient

    from provisioner.api.app import ApiDeps, create_app
    from provisioner.api.auth import create_token
    from provisioner.clock import ManualClock
    from provisioner.domain.instances import CloudInstance, InstanceState
    from provisioner.domain.jobs import Job, JobState
    from provisioner.domain.nodes import Node, NodeKind, NodeState
    from provisioner.domain.snapshot import ClusterSnapshot
    from provisioner.domain.telemetry import GpuReading, GpuTelemetry
    from provisioner.store import Store

    store = Store(db_url)
    S = InstanceState
    for iid, node, price, state in (
        ("i-1", "cloud-1", "9.83", S.READY),
        ("i-2", "cloud-2", "4.10", S.JOINING),
        ("i-3", "cloud-3", "2.50", S.READY),
        ("i-4", "cloud-4", "7.00", S.TERMINATED),
    ):
        inst = CloudInstance(iid, "aws-a100", OFFER, "A100", 8, Decimal(price), S.REQUESTED,
                             NOW - 900, decision_id="d-1", node_name=node)  # fmt: skip
        store.add_instance(inst)
        if state is not S.REQUESTED:
            store.transition(iid, S.ALLOCATED, NOW - 800, "running")
        if state is not S.ALLOCATED:
            store.transition(iid, S.JOINING, NOW - 700, "booting")
        if state in (S.READY, S.TERMINATED):
            store.transition(iid, S.READY, NOW - 600, "slurmd up")
        if state is S.TERMINATED:
            store.transition(iid, S.TERMINATING, NOW - 300, "idle")
            store.transition(iid, S.TERMINATED, NOW - 200, "gone")
    run = dict(state=JobState.RUNNING, start_ts=NOW - 100)
    snap = ClusterSnapshot(
        taken_ts=NOW,
        jobs=(Job("4", 8, NOW - 500, account="nlp", nodes=("cloud-1",), **run),),
        nodes=(
            Node("gpu-01", NodeKind.ONPREM, 8, 0, state=NodeState.IDLE),
            Node("cloud-1", NodeKind.BURST, 8, 8, state=NodeState.ALLOCATED),
        ),
    )
    payload = GpuTelemetry(
        node="gpu-01",
        sampled_ts=NOW - 5,
        gpus=tuple(GpuReading(index=i, uuid=f"GPU-{i}", util_pct=50.0) for i in range(3)),
    )
    store.upsert_telemetry("gpu-01", payload.to_gpu_samples(), NOW)
    deps = ApiDeps(store=store, clock=ManualClock(datetime.fromtimestamp(NOW, UTC)),
                   snapshot=lambda: snap, policy=POLICY)  # fmt: skip
    client = TestClient(create_app(deps))
    client.post("/login", data={"token": create_token(store, "viewer", "v", NOW)})
    page = client.get("/gpus").text
    client.close()
    store.close()
    groups = re.findall(r'data-node-group="([^"]+)" data-kind="([^"]+)" data-phase="([^"]+)"', page)
    assert groups == [("gpu-01", "on-prem", "idle"), ("cloud-1", "cloud", "serving"),
                      ("cloud-2", "cloud", "booting"), ("cloud-3", "cloud", "serving")]  # fmt: skip
    rows = re.findall(r'<tr data-node="([^"]+)" data-gpu="(\d+)"( data-unsampled="1")?', page)
    assert len(rows) == 4 * 8  # every GPU once; i-4 has ended
    unsampled = {(n, int(g)) for n, g, u in rows if u}
    assert unsampled == {(n, int(g)) for n, g, _ in rows} - {("gpu-01", 0), ("gpu-01", 1),
                                                         ("gpu-01", 2)}  # fmt: skip
    assert 'data-cloud="24"' in page and 'data-onprem="8"' in page
    idle = re.search(r'id="cloud-idle-usd" data-usd="([^"]+)"', page)
    assert idle and Decimal(idle.group(1)) == Decimal("2.50")  # cloud-3 only
    assert 'href="/jobs?ran_on=cloud-1">4</a>' in page


def test_gpus_page_shows_mig_slices_with_their_jobs_and_memory(db_url):
    """Issue 32: a node with 2 whole GPUs and one GPU cut into 7 MIG slices (Slurm: 7 devices of
    1g.10gb, 2 held; 8 shards). Its agent reports GPU 2 in MIG mode with two instances, job 7 on
    instance 1; job 7 asks Slurm for one 1g.10gb device. By hand: 3 physical GPUs, each slice's
    memory, no utilisation for a slice."""
    from datetime import UTC, datetime

    from api_helpers import NOW, POLICY
    from fastapi.testclient import TestClient

    from provisioner.api.app import ApiDeps, create_app
    from provisioner.api.auth import create_token
    from provisioner.clock import ManualClock
    from provisioner.domain.gpu_share import MigDevices, NodeShares, ShareRequest
    from provisioner.domain.jobs import Job, JobState
    from provisioner.domain.nodes import Node, NodeKind, NodeState
    from provisioner.domain.snapshot import ClusterSnapshot
    from provisioner.domain.telemetry import GpuReading, GpuTelemetry, MigInstance
    from provisioner.store import Store

    store = Store(db_url)
    shares = NodeShares(mig=(MigDevices("1g.10gb", 7, 2),), shards=8, shards_used=None)
    snap = ClusterSnapshot(
        taken_ts=NOW,
        jobs=(
            Job(
                "7",
                0,
                NOW - 500,
                account="nlp",
                nodes=("gpu-01",),
                state=JobState.RUNNING,
                start_ts=NOW - 100,
                share=ShareRequest("mig", 1, "1g.10gb"),
            ),
        ),
        nodes=(Node("gpu-01", NodeKind.ONPREM, 2, 0, state=NodeState.MIXED, shares=shares),),
    )
    payload = GpuTelemetry(
        node="gpu-01",
        sampled_ts=NOW - 5,
        gpus=(
            *(GpuReading(index=i, uuid=f"GPU-{i}", util_pct=10.0) for i in range(2)),
            GpuReading(index=2, uuid="GPU-2", mig_enabled=True),
        ),
        mig_instances=(
            MigInstance(
                gpu_index=2,
                gpu_instance_id=1,
                profile="1g.10gb",
                mem_used_mib=4096,
                mem_total_mib=9984,
                jobs=("7",),
            ),
            MigInstance(
                gpu_index=2,
                gpu_instance_id=2,
                profile="1g.10gb",
                mem_used_mib=0,
                mem_total_mib=9984,
            ),
        ),
    )
    store.upsert_telemetry("gpu-01", payload.to_gpu_samples(), NOW)
    store.put_telemetry_payload("gpu-01", NOW - 5, NOW, payload.model_dump(mode="json"), {})
    deps = ApiDeps(store=store, clock=ManualClock(datetime.fromtimestamp(NOW, UTC)),
                   snapshot=lambda: snap, policy=POLICY)  # fmt: skip
    client = TestClient(create_app(deps))
    client.post("/login", data={"token": create_token(store, "viewer", "v", NOW)})
    page = client.get("/gpus").text
    client.close()
    store.close()
    assert 'data-onprem="3"' in page  # 2 whole GPUs + the one the slices are cut from
    rows = re.findall(r'<tr data-node="gpu-01" data-gpu="(\d+)"', page)
    assert rows == ["0", "1", "2"]
    slices = re.findall(
        r'data-gpu="2" data-slice="(\d+)">.*?MIG 1g.10gb: (.*?)</td>.*?data-field="util_pct">n/a'
        r'.*?data-field="slice-mem">([\d,]+) / ([\d,]+) MiB',
        page,
        re.S,
    )
    assert [(i, "7" in jobs, used, total) for i, jobs, used, total in slices] == [
        ("1", True, "4,096", "9,984"),
        ("2", False, "0", "9,984"),
    ]
    assert 'id="mig-note"' in page and "no utilisation per MIG instance" in page
    assert "7 MIG 1g.10gb (5 free), 8 shards (use not reported by this Slurm)" in page
    assert "(gpu:1g.10gb:1)" in page


def test_a_job_and_an_instance_page_list_the_rows_their_dollars_sum(fresh: Env):
    """Drill-down: job 555 (hand-written ledger rows: 2 x $2.730556) links its instance i-1;
    i-1's page shows its lifecycle (seed: requested, allocated, ready), its bill at its price,
    and job 555 among the jobs it ran. Unknown ids are a 404 that says so."""
    from test_api_jobs import seed_jobs

    seed_jobs(fresh)
    sign_in(fresh, "viewer")
    page = fresh.client.get("/jobs/555").text
    assert re.search(r'id="job-cost" data-usd="5\.461112"', page)
    rows = re.findall(
        r'<td class="num" data-usd="([^"]+)">', page[page.index('id="ledger-table"') :]
    )
    assert [Decimal(v) for v in rows] == [Decimal("2.730556")] * 2
    assert re.search(r'id="ledger-total" data-usd="5\.461112"', page)
    assert 'href="/instances/i-1"' in page and 'href="/jobs?team=vision"' in page
    page = fresh.client.get("/instances/i-1").text
    states = re.findall(r'<tr><td><span class="state s-([a-z]+)">', page)
    assert states == ["requested", "allocated", "ready"]
    assert 'href="/jobs/555"' in page and 'href="/instances?pool=aws-a100"' in page
    (si,) = [s for s in fresh.store.instances() if s.instance.instance_id == "i-1"]
    billed = Decimal("9.83") * Decimal(repr(si.billed_seconds)) / 3600
    assert re.search(rf'id="instance-billed" data-usd="{billed:.6f}"', page)
    for path, words in (("/jobs/nope", "no such job"), ("/instances/i-nope", "no such instance")):
        r = fresh.client.get(path)
        assert r.status_code == 404 and words in r.text
    # the tables link to the pages
    assert 'href="/jobs/555"' in fresh.client.get("/jobs").text
    assert 'href="/instances/i-1"' in fresh.client.get("/instances").text


def test_overview_shows_the_waiting_policy_in_force_and_why(db_url):
    """No round yet: default. After rounds, the newest one's choice, linked to the feed."""
    from api_helpers import NOW

    from provisioner.domain.plan import Decision, ReasonCode
    from provisioner.store import Store

    store = Store(db_url)
    assert 'id="waiting-policy">default<' in overview_as_viewer(store)
    store = Store(db_url)

    def round_(n: int, chosen: str, why: str) -> Decision:
        return Decision(f"policy-selection-{n}", ReasonCode.POLICY_SELECTION,
                        detail={"chosen": chosen, "why": why})  # fmt: skip

    store.record_decisions([round_(1, "default", "kept default")], NOW - 7200)
    store.record_decisions([round_(2, "per-gpu-2000", "switched default -> per-gpu-2000")], NOW)
    page = overview_as_viewer(store)
    tile = page[page.index('id="tile-waiting-policy"') :]
    assert re.search(r'id="waiting-policy">per-gpu-2000<', tile)
    assert 'href="/decisions?reason=policy_selection"' in tile
    assert 'title="switched default -&gt; per-gpu-2000"' in tile
