"""Migration 0013_usage_gpu_part: a database at 0012 with job usage and ledger rows upgrades in
place, those rows held no part of a GPU as far as anyone knows (""), the ledger groups them
under that, and it downgrades again keeping the rows."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import inspect, text

from provisioner.store import Store, make_engine, migrations

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z

USAGE = (
    "INSERT INTO job_usage (job_id, node_name, instance_id, pool, gpus, start_ts, end_ts, "
    'account, team, partition, "user", part_gpus) VALUES '
    "('7', 'gpu-01', '', 'onprem', 0, :t0, :t1, 'acct', 'vision', 'gpu', 'ann', 0.25)"
)
LEDGER = (
    "INSERT INTO ledger (start_ts, end_ts, day, kind, cloud, region, pool, instance_id, "
    'node_name, offer, instance_type, capacity, job_id, team, account, "user", partition, '
    "decision_id, gpus, quantity, unit, unit_price_micros, cost_micros) VALUES "
    "(:t0, :t1, '2026-01-01', 'onprem', '', '', 'onprem', '', 'gpu-01', '', '', '', '7', "
    "'vision', 'acct', 'ann', 'gpu', '', 0, 0.25, 'GPU-Hours', 1200000, 300000)"
)


def columns(engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def test_0012_rows_upgrade_with_no_part_and_downgrade_again(db_url):
    engine = make_engine(db_url)
    migrations.upgrade(engine, "0012_usage_parts")
    with engine.begin() as conn:
        conn.execute(text(USAGE), {"t0": T0, "t1": T0 + 3600})
        conn.execute(text(LEDGER), {"t0": T0, "t1": T0 + 3600})
    migrations.upgrade(engine)
    assert "gpu_part" in columns(engine, "job_usage") and "gpu_part" in columns(engine, "ledger")
    engine.dispose()

    store = Store(db_url)
    try:
        (usage,) = store.job_usage(node_name="gpu-01")
        assert usage.gpu_part == "" and usage.part_gpus == 0.25
        (row,) = store.ledger_entries(job_id="7")
        assert row.gpu_part == ""
        # $1.20 a GPU-hour x 1/4 GPU x 1 h = $0.30, under no slice; a whole day and a part
        for to in (T0 + 86_400, T0 + 7200):
            assert store.grouped_costs(["gpu_part"], T0, to) == {("",): (Decimal("0.300000"), 1)}
    finally:
        store.close()

    engine = make_engine(db_url)
    migrations.downgrade(engine, "0012_usage_parts")
    assert "gpu_part" not in columns(engine, "job_usage")
    assert "gpu_part" not in columns(engine, "ledger")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM ledger")).scalar_one() == 1
        assert conn.execute(text("SELECT part_gpus FROM job_usage")).scalar_one() == 0.25
    engine.dispose()
