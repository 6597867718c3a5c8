"""`GET /v1/iac/review`: the router on its own (temp git repo) and inside the real app (auth)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from iac_helpers import AWS_POOL, GCP_POOL, commit_all, pool, write_policies

from provisioner.iac.api import iac_router

pytestmark = pytest.mark.pulumi


@pytest.fixture
def client(repo):
    app = FastAPI()
    app.include_router(iac_router(repo / "policies"), prefix="/v1")
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_review_json_and_markdown(repo, client):
    write_policies(repo / "policies", [pool(AWS_POOL, max_nodes=8), GCP_POOL])
    r = client.get("/v1/iac/review")
    assert r.status_code == 200
    data = r.json()
    assert data["verdict"] == "pass" and data["base"].startswith("HEAD (")
    aws = next(p for p in data["pools"] if p["name"] == "aws-a100")
    assert aws["resources"][0]["properties"] == [{"path": "maxSize", "old": 4, "new": 8}]
    md = client.get("/v1/iac/review", params={"format": "markdown"})
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert "`maxSize`: `4` → `8`" in md.text and "Pulumi mocks" in md.text


def test_review_against_a_base_ref_and_violation(repo, client):
    write_policies(repo / "policies", [pool(AWS_POOL, max_nodes=8)])
    sha = commit_all(repo, "bigger")
    write_policies(repo / "policies", [pool(AWS_POOL, max_nodes=30)])
    data = client.get("/v1/iac/review", params={"base": "HEAD~1"}).json()
    assert data["verdict"] == "fail" and data["exit_code"] == 1
    assert data["violations"][0]["policy"] == "pool-max-size-within-cap"
    assert next(p for p in data["pools"] if p["name"] == "gcp-a100")["status"] == "removed"
    # a cached answer for the same inputs; a new one when the files change
    again = client.get("/v1/iac/review", params={"base": "HEAD~1"}).json()
    assert again == data
    data = client.get("/v1/iac/review", params={"base": sha}).json()
    assert data["pools"][0]["policy_changes"] == [{"path": "max_nodes", "old": 8, "new": 30}]


def test_bad_inputs(repo, client):
    assert client.get("/v1/iac/review", params={"base": "nope"}).status_code == 400
    assert client.get("/v1/iac/review", params={"base": "--output=/tmp/x"}).status_code == 400
    assert client.get("/v1/iac/review", params={"expected_use": 2}).status_code == 422
    assert client.get("/v1/iac/review", params={"format": "html"}).status_code == 422
    (repo / "policies" / "pools.yaml").write_text("pools:\n  - name: x1\n    cloud: azure\n")
    r = client.get("/v1/iac/review")
    assert r.status_code == 422 and "pools.yaml: pools[0].cloud" in r.json()["detail"]


def test_route_in_the_app_needs_a_viewer_token(tmp_path):
    from provisioner.api.app import ApiDeps, create_app
    from provisioner.api.auth import Role, create_token
    from provisioner.clock import ManualClock
    from provisioner.store import Store

    store = Store(f"sqlite:///{tmp_path / 'api.sqlite'}")
    try:
        clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
        app = create_app(ApiDeps(store=store, clock=clock))
        token = create_token(store, Role.VIEWER, "viewer-bot", 0.0)
        with TestClient(app, raise_server_exceptions=False) as c:
            assert c.get("/v1/iac/review").status_code == 401
            r = c.get(
                "/v1/iac/review",
                params={"base": "no-such-ref-here"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert r.status_code == 400  # authorised; the ref is checked before any render
            assert "/v1/iac/review" in c.get("/openapi.json").json()["paths"]
    finally:
        store.close()
