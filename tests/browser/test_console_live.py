"""The console on the running demo: sign-in, roles, CSRF, the operator's pause, live refresh.

Runs first (file order): the `finished` tests stop this demo.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import WAIT_MS, Console, Demo, api

# Generous: the session fixtures start, run and stop the demo on a possibly loaded machine.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]


def test_sign_in_exchanges_the_token_for_an_httponly_strict_cookie(browser, live_demo: Demo):
    c = Console(browser, live_demo.url)
    try:
        # A page without a session sends the browser to the sign-in form.
        c.page.goto(live_demo.url + "/costs", wait_until="load")
        assert "/login" in c.page.url
        c.page.fill("#token", "pbt_000000000000_not-a-real-token-at-all")
        c.page.click("#login-form button[type=submit]")
        c.page.wait_for_selector("#login-error")
        assert c.context.cookies() == []

        # The refused form still knows where the visitor was going.
        c.page.fill("#token", live_demo.viewer)
        with c.page.expect_navigation():
            c.page.click("#login-form button[type=submit]")
        c.page.wait_for_selector("#cost-table")
        assert c.page.url.endswith("/costs")
        assert live_demo.viewer not in c.page.url
        (cookie,) = c.context.cookies()
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
        assert live_demo.viewer not in cookie["value"]
        # Scripts cannot read the session cookie.
        assert "pbc_session" not in c.page.evaluate("document.cookie")
        assert c.page.inner_text("#role") == "viewer"
        c.shot("login-then-costs-live")

        # Signing out ends the session: the cookie no longer opens pages.
        old = cookie["value"]
        with c.page.expect_navigation():
            c.page.click("header form[action='/logout'] button")
        assert "/login" in c.page.url
        r = c.page.request.get(
            live_demo.url + "/", headers={"Cookie": f"pbc_session={old}"}, max_redirects=0
        )
        assert r.status == 303 and "/login" in r.headers["location"]
        assert c.errors == []
    finally:
        c.close()


def test_viewer_sees_no_operator_form_and_cannot_pause(browser, live_demo: Demo):
    c = Console(browser, live_demo.url)
    try:
        c.sign_in(live_demo.viewer)
        page = c.goto("/")
        page.wait_for_selector("#bursting-state")
        assert page.locator("#operator-actions").count() == 0
        assert page.locator("#pause-bursting").count() == 0
        # Forging the form with the viewer's own session and CSRF token is refused.
        csrf = page.get_attribute("header input[name=csrf]", "value")
        r = page.request.post(live_demo.url + "/actions/pause", form={"csrf": csrf or ""})
        assert r.status == 403
        assert api(live_demo.url, live_demo.viewer, "/v1/operator")["paused"] is False
        assert c.errors == []
    finally:
        c.close()


def test_operator_pauses_and_resumes_bursting_with_csrf(browser, live_demo: Demo):
    c = Console(browser, live_demo.url)
    try:
        c.sign_in(live_demo.operator)
        page = c.goto("/")
        assert page.inner_text("#bursting-state") == "Active"
        # Without the CSRF token (what a forged cross-site form would send) nothing changes.
        r = page.request.post(live_demo.url + "/actions/pause", form={"reason": "forged"})
        assert r.status == 403
        assert api(live_demo.url, live_demo.viewer, "/v1/operator")["paused"] is False

        page.fill("#pause-reason", "browser test: maintenance")
        with page.expect_navigation():
            page.click("#pause-bursting")
        page.wait_for_selector("#resume-bursting")
        assert page.inner_text("#bursting-state") == "Paused"
        state = api(live_demo.url, live_demo.viewer, "/v1/operator")
        assert state["paused"] is True
        assert state["reason"] == "browser test: maintenance"
        assert "demo-operator" in state["updated_by"]
        c.shot("overview-paused-operator")

        with page.expect_navigation():
            page.click("#resume-bursting")
        page.wait_for_selector("#pause-bursting")
        assert page.inner_text("#bursting-state") == "Active"
        assert api(live_demo.url, live_demo.viewer, "/v1/operator")["paused"] is False
        assert c.errors == []
    finally:
        c.close()


def test_overview_refreshes_itself_while_the_demo_runs(browser, live_demo: Demo):
    c = Console(browser, live_demo.url)
    try:
        c.sign_in(live_demo.viewer)
        page = c.goto("/")
        first = page.inner_text("#as-of")
        # htmx swaps the live part in place; the page itself is not reloaded.
        page.evaluate("window.__same_page = true")
        # The demo's clock moves once per pass; a pass can take many seconds on a loaded machine.
        page.wait_for_function(
            "t => document.getElementById('as-of').textContent !== t",
            arg=first,
            timeout=4 * WAIT_MS,
        )
        assert page.evaluate("window.__same_page") is True
        # The demo's controller publishes its cluster view: backlog and on-prem use are shown.
        page.wait_for_selector("#pending-jobs")
        status = api(live_demo.url, live_demo.viewer, "/v1/status")
        assert "snapshot" in status
        total = status["snapshot"]["nodes"]
        assert total > 0
        c.shot("overview-live")
        assert c.errors == []
    finally:
        c.close()
