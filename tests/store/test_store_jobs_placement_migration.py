"""Migration 0014_jobs_cloud_placement: jobs at 0013 whose placement an earlier build overwrote
(a finished cloud job seen again after its instance ended) are found by `placement="cloud"`
again; jobs that named no instance keep theirs."""

from __future__ import annotations

from sqlalchemy import text

from provisioner.store import Store, make_engine, migrations

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z

JOB = (
    'INSERT INTO jobs (job_id, submit_ts, state, gpus, gpu_type, partition, account, "user", '
    "team, start_ts, end_ts, nodes, instance_ids, placement, first_seen_ts, last_seen_ts, "
    "prediction_source) VALUES (:id, :t0, 'completed', 1, '', 'gpu', 'acct', 'ann', 'vision', "
    ":t0, :t1, :nodes, :ids, :placement, :t0, :t1, '')"
)


def test_0013_jobs_that_ran_on_an_instance_are_placed_in_the_cloud_again(db_url):
    engine = make_engine(db_url)
    migrations.upgrade(engine, "0013_usage_gpu_part")
    rows = [  # (id, nodes, instance ids, placement as an earlier build left it)
        ("lost", '["burst-1"]', '["i-1"]', "onprem"),  # the bug: the instance had ended
        ("kept", '["burst-2"]', '["i-2"]', "cloud"),
        ("here", '["gpu-01"]', "[]", "onprem"),
        ("wait", "[]", "[]", ""),
    ]
    with engine.begin() as conn:
        for job_id, nodes, ids, placement in rows:
            conn.execute(
                text(JOB),
                {"id": job_id, "t0": T0, "t1": T0 + 60, "nodes": nodes, "ids": ids,
                 "placement": placement},
            )  # fmt: skip
    migrations.upgrade(engine)
    engine.dispose()

    store = Store(db_url)
    try:
        assert sorted(r.job_id for r in store.job_records(placement="cloud")) == ["kept", "lost"]
        assert [r.job_id for r in store.job_records(placement="onprem")] == ["here"]
        assert [r.job_id for r in store.job_records(placement="")] == ["wait"]
    finally:
        store.close()

    engine = make_engine(db_url)
    migrations.downgrade(engine, "0013_usage_gpu_part")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 4
    engine.dispose()
