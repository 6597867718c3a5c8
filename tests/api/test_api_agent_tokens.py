"""Issue 10 item 5: agent tokens bound to one node, token expiry and revocation."""

from __future__ import annotations

import pytest
from api_helpers import NOW

from provisioner.api.auth import Role, create_token, verify_token


def payload(node: str, ts: float = NOW) -> dict:
    return {"node": node, "sampled_ts": ts, "gpus": [{"index": 0, "util_pct": 50.0}]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_agent_token_pushes_only_its_own_node(fresh):
    tok = create_token(fresh.store, Role.AGENT, "nvml@gpu-01", NOW, node="gpu-01")
    ok = fresh.client.post("/v1/telemetry", json=payload("gpu-01"), headers=bearer(tok))
    assert ok.status_code == 202, ok.text
    other = fresh.client.post("/v1/telemetry", json=payload("gpu-02"), headers=bearer(tok))
    assert other.status_code == 403
    assert "gpu-01" in other.json()["detail"]
    assert [t.node for t in fresh.store.telemetry()] == ["gpu-01"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/status"),
        ("GET", "/v1/telemetry"),
        ("GET", "/v1/costs"),
        ("POST", "/v1/operator/pause"),
        ("POST", "/v1/pools/aws-a100/drain"),
        ("GET", "/v1/tokens"),
        ("GET", "/metrics"),
    ],
)
def test_agent_token_can_do_nothing_else(fresh, method, path):
    tok = create_token(fresh.store, Role.AGENT, "nvml@gpu-01", NOW, node="gpu-01")
    r = fresh.client.request(method, path, headers=bearer(tok))
    assert r.status_code == 403, r.text
    assert fresh.store.operator_state().paused is False


def test_viewer_may_not_push_telemetry_and_operator_may_push_any_node(fresh):
    r = fresh.client.post("/v1/telemetry", json=payload("gpu-02"), headers=fresh.h("viewer"))
    assert r.status_code == 403
    r = fresh.client.post("/v1/telemetry", json=payload("gpu-02"), headers=fresh.h("operator"))
    assert r.status_code == 202


def test_agent_tokens_need_a_node_and_others_take_none(fresh):
    with pytest.raises(ValueError, match="node"):
        create_token(fresh.store, Role.AGENT, "x", NOW)
    with pytest.raises(ValueError, match="agent"):
        create_token(fresh.store, Role.OPERATOR, "x", NOW, node="gpu-01")


def test_token_expires_after_its_ttl(fresh):
    tok = create_token(fresh.store, Role.VIEWER, "short", NOW, ttl_s=600)
    assert fresh.client.get("/v1/status", headers=bearer(tok)).status_code == 200
    fresh.clock.advance(599)
    assert fresh.client.get("/v1/status", headers=bearer(tok)).status_code == 200
    fresh.clock.advance(1)
    r = fresh.client.get("/v1/status", headers=bearer(tok))
    assert r.status_code == 401 and "expired" in r.json()["detail"]
    assert verify_token(fresh.store, tok, NOW + 600) is None
    assert verify_token(fresh.store, tok, NOW + 599) is not None


def test_token_list_shows_node_and_expiry_and_revoke_stops_an_agent(fresh):
    tok = create_token(fresh.store, Role.AGENT, "nvml@gpu-03", NOW, node="gpu-03", ttl_s=3600)
    tid = tok.split("_")[1]
    listed = {
        t["token_id"]: t for t in fresh.client.get("/v1/tokens", headers=fresh.h("admin")).json()
    }
    assert listed[tid]["node"] == "gpu-03"
    assert listed[tid]["role"] == "agent"
    assert listed[tid]["expires_at"].startswith("2026-01-11T01:00:00")
    assert fresh.client.delete(f"/v1/tokens/{tid}", headers=fresh.h("admin")).status_code == 200
    r = fresh.client.post("/v1/telemetry", json=payload("gpu-03"), headers=bearer(tok))
    assert r.status_code == 401


def test_a_future_sample_is_refused_and_does_not_block_genuine_ones(fresh):
    r = fresh.client.post(
        "/v1/telemetry", json=payload("gpu-02", NOW + 86_400), headers=fresh.h("operator")
    )
    assert r.status_code == 422 and "future" in r.text
    r = fresh.client.post("/v1/telemetry", json=payload("gpu-02", NOW), headers=fresh.h("operator"))
    assert r.status_code == 202 and r.json()["stored"] == 1
    (t,) = fresh.store.telemetry("gpu-02")
    assert t.gpus[0].sampled_ts == NOW
