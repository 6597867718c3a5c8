"""Auth matrix: every endpoint x (no token, bad token, revoked, viewer, operator, admin)."""

from __future__ import annotations

import logging

import pytest
from api_helpers import NOW

from provisioner.api.auth import Role, create_token, verify_token

TELEMETRY = {"node": "gpu-01", "sampled_ts": NOW, "gpus": [{"index": 0, "util_pct": 50.0}]}

# (method, path, minimum role, json body)
ENDPOINTS = [
    ("GET", "/v1/status", Role.VIEWER, None),
    ("GET", "/v1/pools", Role.VIEWER, None),
    ("GET", "/v1/instances", Role.VIEWER, None),
    ("GET", "/v1/instances/i-1", Role.VIEWER, None),
    ("GET", "/v1/decisions", Role.VIEWER, None),
    ("GET", "/v1/decisions/d-1", Role.VIEWER, None),
    ("GET", "/v1/costs?group_by=team,day", Role.VIEWER, None),
    ("GET", "/v1/budgets", Role.VIEWER, None),
    ("GET", "/v1/focus.csv", Role.VIEWER, None),
    ("GET", "/v1/operator", Role.VIEWER, None),
    ("GET", "/v1/telemetry", Role.VIEWER, None),
    ("GET", "/metrics", Role.VIEWER, None),
    ("POST", "/v1/plan", Role.OPERATOR, None),
    ("POST", "/v1/operator/pause", Role.OPERATOR, {"reason": "test"}),
    ("POST", "/v1/operator/resume", Role.OPERATOR, None),
    ("POST", "/v1/pools/aws-a100/drain", Role.OPERATOR, None),
    ("POST", "/v1/pools/aws-a100/undrain", Role.OPERATOR, None),
    ("POST", "/v1/telemetry", Role.OPERATOR, TELEMETRY),
    ("GET", "/v1/tokens", Role.ADMIN, None),
    ("DELETE", "/v1/tokens/{victim}", Role.ADMIN, None),
]
CREDENTIALS = [None, "garbage", "revoked", "viewer", "operator", "admin"]


def _call(env, method, path, body, headers):
    if "{victim}" in path:
        victim = create_token(env.store, Role.VIEWER, "victim", NOW).split("_")[1]
        path = path.replace("{victim}", victim)
    return env.client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("cred", CREDENTIALS)
@pytest.mark.parametrize(("method", "path", "need", "body"), ENDPOINTS, ids=lambda v: str(v))
def test_auth_matrix(env, method, path, need, body, cred):
    if cred is None:
        headers = {}
    elif cred == "garbage":
        headers = {"Authorization": "Bearer pbt_000000000000_not-a-real-secret-at-all"}
    else:
        headers = env.h(cred)
    r = _call(env, method, path, body, headers)
    if cred in (None, "garbage", "revoked"):
        assert r.status_code == 401, r.text
        assert r.headers.get("www-authenticate") == "Bearer"
        assert "detail" in r.json()
    elif Role.parse(cred) < need:
        assert r.status_code == 403, r.text
        assert need.label in r.json()["detail"]
    else:
        assert r.status_code in (200, 202), r.text


def test_other_auth_schemes_and_malformed_headers_are_401(env):
    for value in ("Basic YWRtaW46YWRtaW4=", "Bearer", "Bearer ", "pbt_x", "Token abc"):
        r = env.client.get("/v1/status", headers={"Authorization": value})
        assert r.status_code == 401, value


def test_health_and_openapi_need_no_token(env):
    assert env.client.get("/healthz").json() == {"status": "ok"}
    spec = env.client.get("/openapi.json").json()
    assert "/v1/costs" in spec["paths"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_no_secret_in_responses_or_logs(env, caplog):
    caplog.set_level(logging.DEBUG)
    secret_parts = {t.split("_", 2)[2] for t in env.tokens.values()}
    bodies = []
    for method, path, _need, body in ENDPOINTS:
        for cred in ("admin", "viewer", "garbage"):
            headers = (
                env.h(cred)
                if cred != "garbage"
                else {"Authorization": "Bearer " + env.tokens["admin"] + "x"}
            )
            bodies.append(_call(env, method, path, body, headers).text)
    listing = env.client.get("/v1/tokens", headers=env.h("admin")).json()
    assert listing and all(
        set(t) == {"token_id", "name", "role", "created_at", "revoked_at", "node", "expires_at"}
        for t in listing
    )
    text = "\n".join(bodies) + caplog.text
    for secret in secret_parts:
        assert secret not in text
    for rec in env.store.tokens():
        assert rec.secret_hash not in text and rec.salt not in text


def test_tokens_are_stored_hashed_and_verify(env):
    token = create_token(env.store, "operator", "ci", NOW)
    _, token_id, secret = token.split("_", 2)
    rec = env.store.token(token_id)
    assert rec is not None and secret not in (rec.secret_hash, rec.salt)
    assert verify_token(env.store, token, NOW).role is Role.OPERATOR
    assert verify_token(env.store, token[:-1] + ("A" if token[-1] != "A" else "B"), NOW) is None
    with pytest.raises(ValueError):
        create_token(env.store, "root", "x", NOW)


def test_revoked_token_stops_working(fresh):
    token = create_token(fresh.store, Role.VIEWER, "tmp", NOW)
    h = {"Authorization": f"Bearer {token}"}
    assert fresh.client.get("/v1/status", headers=h).status_code == 200
    tid = token.split("_")[1]
    assert fresh.client.delete(f"/v1/tokens/{tid}", headers=fresh.h("admin")).status_code == 200
    assert fresh.client.get("/v1/status", headers=h).status_code == 401
    assert fresh.client.delete("/v1/tokens/nope", headers=fresh.h("admin")).status_code == 404
