"""`provisioner costs|budgets|decisions` against a real API server on 127.0.0.1: the tables, and
the --json / --csv outputs equal what the API answers for the same query."""

from __future__ import annotations

import csv
import io
import json
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from api_helpers import make_env, seed
from typer.testing import CliRunner

from provisioner.bootstrap import ApiServer
from provisioner.cli import app
from provisioner.plan.reasons import reason_words
from provisioner.store import Store


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('cli') / 'cli.sqlite'}")
    seed(store)
    env = make_env(store)
    server = ApiServer(env.client.app, "127.0.0.1", 0)
    port = server.start(timeout_s=60)
    yield env, f"http://127.0.0.1:{port}"
    server.stop()
    env.client.close()
    store.close()


def run(*args: str) -> str:
    r = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def api(env, path, **params):
    h = {"Authorization": f"Bearer {env.tokens['viewer']}"}
    r = env.client.get(path, params=params, headers=h)
    assert r.status_code == 200
    return r.json()


def test_costs_json_csv_and_table(served):
    env, url = served
    tok = env.tokens["viewer"]
    q = {"group_by": "team,kind", "from": "2026-01-01", "to": "2026-02-01"}
    want = api(env, "/v1/costs", **q)
    assert want["rows"]
    args = ["costs", "--url", url, "--token", tok, "--group-by", "team,kind"]
    args += ["--from", "2026-01-01", "--to", "2026-02-01"]
    assert json.loads(run(*args, "--json")) == want
    rows = list(csv.DictReader(io.StringIO(run(*args, "--csv"))))
    assert [(r["team"], r["kind"], r["cost_usd"]) for r in rows] == [
        (w["team"], w["kind"], w["cost_usd"]) for w in want["rows"]
    ]
    table = run(*args)  # to the cent
    assert all(f"{Decimal(w['cost_usd']):,.2f}" in table for w in want["rows"])


def test_budgets_and_decisions(served):
    env, url = served
    tok = env.tokens["viewer"]
    want = api(env, "/v1/budgets")
    got = json.loads(run("budgets", "--url", url, "--token", tok, "--json"))
    assert got == want
    rows = list(csv.DictReader(io.StringIO(run("budgets", "--url", url, "--token", tok, "--csv"))))
    assert [r["team"] for r in rows] == [t["team"] for t in want["teams"]]
    decisions = api(env, "/v1/decisions", limit=50)
    out = run("decisions", "--url", url, "--token", tok, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["decision_id"] for r in rows] == [d["decision_id"] for d in decisions]
    assert all(r["why"] for r in rows)  # the reason in words
    job = decisions[0]["job_ids"][0]
    rows = json.loads(run("decisions", "--url", url, "--token", tok, "--job", job, "--json"))
    assert rows and all(job in d["job_ids"] for d in rows)


def test_bad_token_and_missing_token_are_clear_errors(served):
    env, url = served
    r = CliRunner().invoke(app, ["costs", "--url", url, "--token", "pbt_nope"])
    assert r.exit_code == 1 and "HTTP 401" in r.output
    r = CliRunner(env={"PROVISIONER_TOKEN": ""}).invoke(app, ["budgets", "--url", url])
    assert r.exit_code == 2 and "--token" in r.output
    r = CliRunner().invoke(
        app, ["costs", "--url", url, "--token", env.tokens["viewer"], "--group-by", "colour"]
    )
    assert r.exit_code == 1 and "group_by" in r.output


def test_jobs_table_at_80_columns_json_and_csv(served):
    from test_api_jobs import seed_jobs

    env, url = served
    seed_jobs(env)
    tok = env.tokens["viewer"]
    want = api(env, "/v1/jobs")
    assert json.loads(run("jobs", "--url", url, "--token", tok, "--json")) == want
    rows = list(csv.DictReader(io.StringIO(run("jobs", "--url", url, "--token", tok, "--csv"))))
    assert [(r["job"], r["usd"]) for r in rows] == [(j["job_id"], j["cost_usd"]) for j in want]
    r = CliRunner().invoke(
        app, ["jobs", "--url", url, "--token", tok, "--where", "cloud"], env={"COLUMNS": "80"}
    )
    assert r.exit_code == 0, r.output
    assert "555" in r.output and "5.46" in r.output and "d-1" in r.output
    assert "556" not in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80


def test_budgets_decisions_and_costs_fit_80_columns_with_dollars_to_the_cent(served):
    """At 80 columns nothing is cut: money prints to the cent (the exact Decimal stays in --json
    and --csv), and each decision is a record whose reason in words wraps as a sentence."""
    env, url = served
    tok = env.tokens["viewer"]

    def at_80(*args: str) -> str:
        r = CliRunner().invoke(app, [*args, "--url", url, "--token", tok], env={"COLUMNS": "80"})
        assert r.exit_code == 0, r.output
        assert max(len(line) for line in r.output.splitlines()) <= 80, r.output
        assert "…" not in r.output, r.output  # folded, never cut
        return r.output

    budgets = api(env, "/v1/budgets")
    out = at_80("budgets")
    for t in budgets["teams"]:
        for key in ("spent_usd", "forecast_usd", "headroom_usd"):
            exact = Decimal(t[key])
            assert f"{exact.quantize(Decimal('0.01'), ROUND_HALF_EVEN):,}" in out, (key, out)
            if exact != exact.quantize(Decimal("0.01")):
                assert t[key] not in out  # six decimals are for scripts
    decisions = api(env, "/v1/decisions", limit=50)
    out = at_80("decisions")
    for d in decisions:
        assert d["decision_id"] in out and d["reason"] in out and d["chosen"] in out
    why = " ".join(out.split())  # the sentence, unwrapped
    assert reason_words(decisions[0]["reason"]) in why
    costs = api(env, "/v1/costs", group_by="team")
    out = at_80("costs")
    for row in costs["rows"]:
        assert f"{Decimal(row['cost_usd']).quantize(Decimal('0.01'), ROUND_HALF_EVEN):,}" in out
