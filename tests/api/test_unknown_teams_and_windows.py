"""A team nobody knows, and a window the ledger cannot cover, answer a 404 with the reason in
the API and a clear message on the page, never an empty report that reads as "nothing spent".

The seed's ledger starts at 2026-01-10 22:00 UTC (on-prem job 100) and NOW is 2026-01-11 00:00;
the budgets name one team, vision.
"""

from __future__ import annotations

import html

import pytest
from api_helpers import POLICY, make_env
from test_console_http import sign_in

from provisioner.store import Store


def viewer(env) -> dict[str, str]:
    return {"Authorization": f"Bearer {env.tokens['viewer']}"}


@pytest.mark.parametrize("path", ["/v1/costs", "/v1/efficiency"])
@pytest.mark.parametrize(
    ("window", "words"),
    [
        ({"from": "2100-01-01", "to": "2100-02-01"}, "after now (2026-01-11T00:00:00Z)"),
        ({"from": "1990-01-01", "to": "1990-02-01"}, "before the ledger's first row"),
        ({"from": "2026-01-01", "to": "2026-01-10T22:00:00Z"}, "first row (2026-01-10T22:00:00Z)"),
    ],
)
def test_a_window_outside_the_ledger_is_a_404_that_says_why(env, path, window, words):
    r = env.client.get(path, params=window, headers=viewer(env))
    assert r.status_code == 404 and words in r.json()["detail"], r.text
    # one second later, the first row is in the window
    r = env.client.get(path, params={"from": "2026-01-01", "to": "2026-01-10T22:00:01Z"},
                       headers=viewer(env))  # fmt: skip
    assert r.status_code == 200


def test_the_pages_say_so_and_still_render(env):
    sign_in(env, "viewer")
    for path in ("/costs", "/ledger"):
        r = env.client.get(path, params={"from": "1990-01-01", "to": "1990-02-01"})
        text = html.unescape(r.text)
        assert r.status_code == 200 and 'id="window-notice"' in text
        assert "before the ledger's first row (2026-01-10T22:00:00Z)" in text
        ok = env.client.get(path, params={"from": "2026-01-10"}).text
        assert 'id="window-notice"' not in ok


def test_a_new_site_with_an_empty_ledger_reports_zero_not_an_error(db_url):
    store = Store(db_url)
    store.sync_budgets(POLICY.budgets, 0.0)
    env = make_env(store)
    try:
        r = env.client.get("/v1/costs", params={"from": "1990-01-01"}, headers=viewer(env))
        assert r.status_code == 200 and r.json()["total_usd"] == "0.000000"
        # a team the budgets name is known before it has run anything
        r = env.client.get("/v1/jobs", params={"team": "vision"}, headers=viewer(env))
        assert r.status_code == 200 and r.json() == []
    finally:
        env.client.close()
        store.close()


def test_an_unknown_team_is_a_404_in_the_api_and_on_the_pages(env):
    r = env.client.get("/v1/jobs", params={"team": "nosuch"}, headers=viewer(env))
    assert r.status_code == 404 and "team 'nosuch': no such team" in r.json()["detail"]
    assert env.client.get("/v1/jobs", params={"team": "vision"}, headers=viewer(env)).is_success
    sign_in(env, "viewer")
    for path in ("/jobs", "/decisions", "/ledger"):
        r = env.client.get(path, params={"team": "nosuch"})
        assert r.status_code == 404, (path, r.status_code)
        assert "no such team" in html.unescape(r.text), path
        assert env.client.get(path, params={"team": "vision"}).status_code == 200, path
