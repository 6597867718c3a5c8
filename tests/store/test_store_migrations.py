"""Migrations apply programmatically, are idempotent, reversible, and match the models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from provisioner.store import Store, make_engine, migrations
from provisioner.store.models import Base

TABLES = {
    "pools",
    "operator_state",
    "intents",
    "instances",
    "instance_transitions",
    "decisions",
    "job_usage",
    "ledger",
    "ledger_rollup",
    "budgets",
    "api_tokens",
    "gpu_telemetry",
    "leader_lease",
    "runtime_history",
    "clock_marks",
    "cloud_clocks",
}


def test_migrations_create_every_table_at_head(store):
    names = set(inspect(store.engine).get_table_names())
    assert names >= TABLES
    with store.engine.connect() as conn:
        assert migrations.current_revision(conn) == migrations.head_revision()


def test_schema_from_migrations_matches_the_models(store):
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == []


def test_opening_twice_is_idempotent_and_keeps_data(db_url):
    s1 = Store(db_url)
    s1.set_paused(True, 1.0, by="test")
    s1.close()
    s2 = Store(db_url)
    assert s2.operator_state().paused is True
    s2.close()


def test_downgrade_to_base_and_up_again(db_url):
    engine = make_engine(db_url)
    migrations.upgrade(engine)
    migrations.downgrade(engine, "base")
    assert not (TABLES & set(inspect(engine).get_table_names()))
    migrations.upgrade(engine)
    assert set(inspect(engine).get_table_names()) >= TABLES
    engine.dispose()


def test_sqlite_file_uses_wal(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'wal.sqlite'}")
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    store.close()


def test_in_memory_database_is_shared_between_sessions():
    s = Store("sqlite://")
    s.set_paused(True, 1.0)
    assert s.operator_state().paused is True
    s.close()
