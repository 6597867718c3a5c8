"""Console sessions: expiry by an injected wall clock, revocation, CSRF comparison."""

from __future__ import annotations

from provisioner.api.auth import Role, create_token, verify_token
from provisioner.api.console.sessions import (
    MAX_SESSIONS_PER_TOKEN,
    Sessions,
    can_operate,
    csrf_ok,
)
from provisioner.store import Store


def test_sessions_expire_and_end_with_their_token(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    token = create_token(store, Role.OPERATOR, "op", 0.0)
    principal = verify_token(store, token, 10.0)
    assert principal is not None
    wall = [1000.0]
    sessions = Sessions(ttl_s=60.0, wall=lambda: wall[0])
    s = sessions.open(principal)
    assert token not in s.session_id and s.session_id != s.csrf
    assert sessions.get(s.session_id, store) == s and can_operate(s)
    assert csrf_ok(s, s.csrf) and not csrf_ok(s, "") and not csrf_ok(s, s.csrf[:-1] + "x")
    wall[0] += 59.9
    assert sessions.get(s.session_id, store) is not None
    wall[0] += 0.2
    assert sessions.get(s.session_id, store) is None  # expired after 60 s of wall time
    s2 = sessions.open(principal)
    store.revoke_token(principal.token_id, 1.0)
    assert sessions.get(s2.session_id, store) is None
    assert sessions.get("unknown", store) is None and sessions.get(None, store) is None
    # a token with an expiry ends its sessions when the controller's clock passes it
    short = create_token(store, Role.VIEWER, "short", 0.0, ttl_s=100.0)
    viewer = verify_token(store, short, 50.0)
    assert viewer is not None
    s3 = sessions.open(viewer)
    assert sessions.get(s3.session_id, store, now_ts=99.0) is not None
    assert sessions.get(s3.session_id, store, now_ts=100.0) is None
    store.close()


def test_a_flood_of_sign_ins_ends_only_the_floods_own_sessions(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    op = verify_token(store, create_token(store, Role.OPERATOR, "op", 0.0), 1.0)
    viewer = verify_token(store, create_token(store, Role.VIEWER, "v", 0.0), 1.0)
    assert op is not None and viewer is not None
    wall = [1000.0]
    sessions = Sessions(ttl_s=3600.0, wall=lambda: wall[0])
    operator = sessions.open(op)
    flood = []
    for _ in range(10_000):  # the viewer signs in again and again
        wall[0] += 0.001
        flood.append(sessions.open(viewer))
    assert sessions.get(operator.session_id, store) == operator  # still signed in
    live = [s for s in flood if sessions.get(s.session_id, store) is not None]
    assert live == flood[-MAX_SESSIONS_PER_TOKEN:]  # the viewer keeps its newest 20
    store.close()
