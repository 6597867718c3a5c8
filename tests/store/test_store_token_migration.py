"""Migration 0003_token_agent_node_expiry: a database at 0002 with tokens upgrades in place,
its tokens keep working (bound to no node, never expiring), and it downgrades again."""

from __future__ import annotations

from sqlalchemy import inspect, text

from provisioner.api.auth import Role, create_token, verify_token
from provisioner.store import Store, make_engine, migrations


def test_0002_database_with_tokens_upgrades_and_tokens_keep_working(db_url):
    engine = make_engine(db_url)
    migrations.upgrade(engine, "0002")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO api_tokens (token_id, name, role, salt, secret_hash, created_ts) "
                "VALUES ('aaaaaaaaaaaa', 'old', 'viewer', 's', 'h', 1.0)"
            )
        )
    migrations.upgrade(engine)
    cols = {c["name"] for c in inspect(engine).get_columns("api_tokens")}
    assert {"node", "expires_ts"} <= cols
    with engine.connect() as conn:
        assert migrations.current_revision(conn) == migrations.head_revision()
    engine.dispose()

    store = Store(db_url)
    try:
        old = store.token("aaaaaaaaaaaa")
        assert old is not None and old.node is None and old.expires_ts is None
        tok = create_token(store, Role.AGENT, "nvml", 10.0, node="gpu-01", ttl_s=60)
        p = verify_token(store, tok, 20.0)
        assert p is not None and p.node == "gpu-01"
    finally:
        store.close()

    engine = make_engine(db_url)
    migrations.downgrade(engine, "0002")
    cols = {c["name"] for c in inspect(engine).get_columns("api_tokens")}
    assert "node" not in cols and "expires_ts" not in cols
    engine.dispose()
