"""Issue 16 items 4 and 5: `/v1/iac/review` renders are bounded per caller and in the process,
the cache is keyed on what changes (expected use to the percent), and answers carry no server
paths."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from iac_helpers import AWS_POOL, GCP_POOL, pool, write_policies

from provisioner.iac.api import RenderLimiter, iac_router

pytestmark = pytest.mark.pulumi


class Tick:
    """An injected monotonic clock."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def tick():
    return Tick()


@pytest.fixture
def client(repo, tick):
    app = FastAPI()
    app.include_router(iac_router(repo / "policies", misses_per_minute=2, clock=tick), prefix="/v1")
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_uncached_renders_are_limited_per_caller_and_cache_hits_are_free(repo, client, tick):
    write_policies(repo / "policies", [pool(AWS_POOL, max_nodes=8), GCP_POOL])
    assert client.get("/v1/iac/review", params={"expected_use": 0.25}).status_code == 200
    # 0.2500001 is the same percent: a cache hit, not a render.
    for use in (0.2500001, 0.2549, 0.25):
        assert client.get("/v1/iac/review", params={"expected_use": use}).status_code == 200
    assert client.get("/v1/iac/review", params={"expected_use": 0.30}).status_code == 200
    r = client.get("/v1/iac/review", params={"expected_use": 0.31})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "a minute" in r.json()["detail"]
    # cached answers are still served while the caller is limited
    assert client.get("/v1/iac/review", params={"expected_use": 0.30}).status_code == 200
    tick.t += 61
    assert client.get("/v1/iac/review", params={"expected_use": 0.31}).status_code == 200


def test_while_a_render_runs_another_uncached_request_gets_429_not_a_queue(repo):
    write_policies(repo / "policies", [pool(AWS_POOL, max_nodes=8), GCP_POOL])
    limiter = RenderLimiter(per_minute=100, clock=Tick())
    app = FastAPI()
    app.include_router(iac_router(repo / "policies", limiter=limiter), prefix="/v1")
    with TestClient(app, raise_server_exceptions=False) as c:
        assert limiter.busy.acquire(blocking=False)  # a render in progress
        try:
            r = c.get("/v1/iac/review", params={"expected_use": 0.4})
            assert r.status_code == 429 and "being rendered" in r.json()["detail"]
        finally:
            limiter.busy.release()
        assert c.get("/v1/iac/review", params={"expected_use": 0.4}).status_code == 200


def test_answers_hold_no_server_paths(repo, client):
    write_policies(repo / "policies", [pool(AWS_POOL, max_nodes=8), GCP_POOL])
    r = client.get("/v1/iac/review", params={"format": "markdown"})
    assert r.status_code == 200
    data = client.get("/v1/iac/review").text
    for text in (r.text, data):
        assert str(repo) not in text
    (repo / "policies" / "pools.yaml").write_text("pools:\n  - name: x1\n    cloud: azure\n")
    bad = client.get("/v1/iac/review", params={"expected_use": 0.5})
    assert bad.status_code == 422
    assert str(repo) not in bad.text and "pools.yaml" in bad.text


def test_every_review_counts_toward_a_per_caller_limit_and_git_finds_the_root_once(
    repo, tick, monkeypatch
):
    """Issue 30: 1,200 reviews with cached or invalid refs started 2 git processes each."""
    import provisioner.iac.api as iac_api

    write_policies(repo / "policies", [pool(AWS_POOL, max_nodes=8), GCP_POOL])
    roots: list[object] = []
    real_root = iac_api.git_root

    def counting_root(path):
        roots.append(path)
        return real_root(path)

    monkeypatch.setattr(iac_api, "git_root", counting_root)
    app = FastAPI()
    router = iac_router(repo / "policies", requests_per_minute=5, clock=tick)
    app.include_router(router, prefix="/v1")
    with TestClient(app, raise_server_exceptions=False) as c:
        assert c.get("/v1/iac/review").status_code == 200
        for _ in range(2):
            assert c.get("/v1/iac/review").status_code == 200  # cached
        for _ in range(2):
            assert c.get("/v1/iac/review", params={"base": "no-such-ref"}).status_code == 400
        r = c.get("/v1/iac/review", params={"base": "no-such-ref"})
        assert r.status_code == 429 and r.headers["retry-after"] == "60"
        assert c.get("/v1/iac/review").status_code == 429  # cached answers count too
        tick.t += 60
        assert c.get("/v1/iac/review").status_code == 200
    assert len(roots) == 1
