"""The OpenAPI document describes every JSON answer with a real schema (response models)."""

from __future__ import annotations

import typing

from fastapi.testclient import TestClient

from provisioner.account.reports import GROUP_KEYS
from provisioner.api.app import ApiDeps, create_app
from provisioner.api.schemas.costs import CostReportOut, ReportRowOut

# Not ours to model: the IaC review is provisioner/iac's, and answers its own report dict.
UNMODELLED = {("/v1/iac/review", "get")}


def test_every_json_answer_has_a_schema(env):
    spec = env.client.get("/openapi.json").json()
    seen = 0
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if (path, method) in UNMODELLED:
                continue
            for code, answer in op["responses"].items():
                content = answer.get("content", {})
                if "application/json" in content:
                    schema = content["application/json"].get("schema", {})
                    assert "$ref" in schema or "type" in schema, (path, method, code, schema)
                    seen += 1
                elif code.startswith("2"):
                    # Not JSON: the CSV exports and Prometheus text, each a string.
                    for media in content.values():
                        assert media["schema"]["type"] == "string", (path, method, code)
    assert seen > 50


def test_a_report_row_models_exactly_the_group_keys():
    group_fields = [f for f in ReportRowOut.model_fields if f not in ("cost_usd", "ledger_rows")]
    assert tuple(group_fields) == GROUP_KEYS
    item = typing.get_args(CostReportOut.model_fields["group_by"].annotation)[0]
    assert typing.get_args(item) == GROUP_KEYS


def test_status_leaves_out_what_is_not_wired_in(env):
    wired = env.client.get("/v1/status", headers=env.h("viewer")).json()
    assert wired["controller"] == {"last_pass": "ok"} and wired["snapshot"]["nodes"] == 3
    bare = TestClient(create_app(ApiDeps(store=env.store, clock=env.clock)))
    body = bare.get("/v1/status", headers=env.h("viewer")).json()
    assert "snapshot" not in body and "controller" not in body  # absent, not null
    spec = bare.get("/openapi.json").json()
    status = spec["components"]["schemas"]["StatusOut"]
    assert "snapshot" not in status["required"] and "controller" not in status["required"]


def test_a_rendering_off_its_model_is_a_500_not_a_lost_field(env, monkeypatch):
    from provisioner.api import render

    real = render.report_dict
    monkeypatch.setattr(render, "report_dict", lambda r: {**real(r), "surprise": 1})
    r = env.client.get("/v1/costs", headers=env.h("viewer"))
    assert r.status_code == 500 and r.json() == {"detail": "internal error"}
    real_pool = render.pool_dict
    monkeypatch.setattr(render, "pool_dict", lambda p, **kw: {**real_pool(p, **kw), "x": 1})
    assert env.client.get("/v1/pools", headers=env.h("viewer")).status_code == 500
