"""The `JobHistory` contract (`provisioner.ports.store`): the jobs table round trips every
field, keeps a job's first sighting, ignores a view older than the one stored, closes the jobs a
complete listing lost, filters and pages newest first, and prunes closed jobs only. On the
in-memory class (`MemoryJobHistory`), SQLite and PostgreSQL alike (see test_store_contract.py
for how the engines are chosen). Every expected value is written out by hand."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from test_store_contract import DAY, IMPLEMENTATIONS, T0

from provisioner.domain.job_records import JobRecord
from provisioner.ports.store import JobHistory
from provisioner.store import Store
from provisioner.store.memory import MemoryJobHistory

H = 3600.0


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def jobs(db_backend: str, request: pytest.FixtureRequest) -> Iterator[JobHistory]:
    if db_backend == "memory":
        yield MemoryJobHistory()
        return
    s = Store(request.getfixturevalue("db_url"))
    try:
        yield s
    finally:
        s.close()


def rec(job_id: str, seen: float, **kw: object) -> JobRecord:
    base: dict[str, object] = {
        "submit_ts": T0,
        "state": "pending",
        "gpus": 8,
        "first_seen_ts": seen,
        "last_seen_ts": seen,
    }
    return JobRecord(job_id=job_id, **{**base, **kw})  # type: ignore[arg-type]


FULL = JobRecord(
    job_id="4242_7",
    submit_ts=T0,
    state="running",
    gpus=4,
    gpu_type="a100",
    partition="cloud",
    account="cv-lab",
    user="ann",
    team="vision",
    eligible_ts=T0 + 30,
    start_ts=T0 + 600.5,
    end_ts=None,
    time_limit_s=86_400.0,
    nodes=("cloud-aws-1", "cloud-aws-2"),
    instance_ids=("i-0abc", "i-0def"),
    first_seen_ts=T0 + 5,
    last_seen_ts=T0 + 615,
)


def test_a_record_reads_back_with_every_field(jobs: JobHistory) -> None:
    assert jobs.record_jobs([FULL]) == 1
    assert jobs.job_record("4242_7") == FULL
    assert jobs.job_records() == [FULL]
    assert jobs.job_record("nope") is None
    assert FULL.waited_s == 570.5 and FULL.in_cloud


def test_an_update_keeps_the_first_sighting_and_an_older_view_changes_nothing(
    jobs: JobHistory,
) -> None:
    jobs.record_jobs([rec("1", T0 + 10)])
    started = rec("1", T0 + 40, state="running", start_ts=T0 + 35, nodes=("gpu-1",))
    assert jobs.record_jobs([started]) == 1
    assert jobs.job_record("1") == replace(started, first_seen_ts=T0 + 10)
    # a lapsed controller's view from before the start
    assert jobs.record_jobs([rec("1", T0 + 20)]) == 0
    assert jobs.job_record("1") == replace(started, first_seen_ts=T0 + 10)


def test_jobs_a_complete_listing_lost_are_closed_as_gone(jobs: JobHistory) -> None:
    jobs.record_jobs(
        [
            rec("run", T0, state="running", start_ts=T0, nodes=("gpu-1",)),
            rec("wait", T0),
            rec("still", T0),
            rec("done", T0, state="completed", start_ts=T0, end_ts=T0 + 60, nodes=("gpu-1",)),
        ]
    )
    assert jobs.close_missing_jobs({"still"}, T0 + 300) == 2
    got = {r.job_id: (r.state, r.end_ts) for r in jobs.job_records()}
    assert got == {
        "run": ("gone", T0 + 300),
        "wait": ("gone", None),
        "still": ("pending", None),
        "done": ("completed", T0 + 60),
    }


def test_a_job_keeps_the_instances_it_ran_on_after_they_are_gone(jobs: JobHistory) -> None:
    """Slurm still lists a finished job with its node after the instance behind the node has
    ended, so a later record names no instance: the job still ran in the cloud."""
    ran = {"state": "completed", "start_ts": T0, "end_ts": T0 + 60, "nodes": ("cloud-1",)}
    jobs.record_jobs([rec("j", T0 + 60, instance_ids=("i-2",), **ran)])
    jobs.record_jobs([rec("j", T0 + 120, **ran)])  # the instance ended
    (r,) = jobs.job_records()
    assert r.instance_ids == ("i-2",) and r.placement == "cloud"
    # and the filter agrees with the record: `where=cloud` still finds it
    assert [x.job_id for x in jobs.job_records(placement="cloud")] == ["j"]
    assert jobs.job_records(placement="onprem") == []
    # requeued onto another instance: both cost it money, both are listed
    jobs.record_jobs([rec("j", T0 + 180, instance_ids=("i-1",), **ran)])
    assert jobs.job_records()[0].instance_ids == ("i-1", "i-2")
    assert [x.job_id for x in jobs.job_records(ran_on="i-2")] == ["j"]


def test_filters_and_pages_newest_submit_first(jobs: JobHistory) -> None:
    jobs.record_jobs(
        [
            rec("a", T0, submit_ts=T0, team="vision", partition="onprem"),
            rec("b", T0 + H, submit_ts=T0 + H, team="nlp", partition="cloud",
                state="running", start_ts=T0 + H, nodes=("cloud-1",), instance_ids=("i-1",)),
            rec("c", T0 + 2 * H, submit_ts=T0 + 2 * H, team="vision", state="completed",
                start_ts=T0 + 2 * H, end_ts=T0 + 3 * H, nodes=("gpu-1",)),
            rec("d", T0 + 2 * H, submit_ts=T0 + 2 * H, team="vision"),
        ]
    )  # fmt: skip
    assert [r.job_id for r in jobs.job_records()] == ["c", "d", "b", "a"]
    assert [r.job_id for r in jobs.job_records(limit=2, offset=1)] == ["d", "b"]
    assert [r.job_id for r in jobs.job_records(team="vision")] == ["c", "d", "a"]
    assert [r.job_id for r in jobs.job_records(partition="cloud")] == ["b"]
    assert [r.job_id for r in jobs.job_records(placement="cloud")] == ["b"]
    assert [r.job_id for r in jobs.job_records(placement="onprem")] == ["c"]
    assert [r.job_id for r in jobs.job_records(placement="")] == ["d", "a"]
    assert [r.job_id for r in jobs.job_records(states={"completed"})] == ["c"]
    # alive in [T0 + 3.5 h, T0 + 4 h): open jobs, and none that ended at T0 + 3 h
    assert [r.job_id for r in jobs.job_records(since=T0 + 3.5 * H)] == ["d", "b", "a"]
    assert [r.job_id for r in jobs.job_records(since=T0 + 3 * H)] == ["c", "d", "b", "a"]
    assert [r.job_id for r in jobs.job_records(until=T0 + H)] == ["a"]
    # an instance's jobs, by its id or its node's name; a name is matched whole, never in part
    assert [r.job_id for r in jobs.job_records(ran_on="i-1")] == ["b"]
    assert [r.job_id for r in jobs.job_records(ran_on="cloud-1")] == ["b"]
    assert [r.job_id for r in jobs.job_records(ran_on="gpu-1")] == ["c"]
    assert jobs.job_records(ran_on="i-") == [] and jobs.job_records(ran_on="gpu_1") == []
    assert jobs.job_records(ran_on="%") == []


def test_pruning_forgets_closed_jobs_only(jobs: JobHistory) -> None:
    jobs.record_jobs(
        [
            rec("old", T0, state="completed", start_ts=T0, end_ts=T0 + 60, nodes=("gpu-1",)),
            rec("queued", T0),  # pending for months: still a job
            rec("new", T0 + 10 * DAY, state="failed", start_ts=T0, end_ts=T0 + 10 * DAY),
        ]
    )
    assert jobs.prune_jobs(T0 + 5 * DAY) == 1
    assert sorted(r.job_id for r in jobs.job_records()) == ["new", "queued"]


def test_a_prediction_made_while_waiting_is_kept_once_the_job_runs(jobs: JobHistory) -> None:
    waiting = rec("9", T0 + 10, predicted_runtime_s=1800.0, prediction_source="group")
    jobs.record_jobs([waiting])
    running = rec("9", T0 + 40, state="running", start_ts=T0 + 30, nodes=("gpu-1",))
    jobs.record_jobs([running])
    got = jobs.job_record("9")
    assert got is not None and got.state == "running"
    assert (got.predicted_runtime_s, got.prediction_source) == (1800.0, "group")
    newer = rec("9", T0 + 50, predicted_runtime_s=900.0, prediction_source="user")
    jobs.record_jobs([newer])
    got = jobs.job_record("9")
    assert got is not None and (got.predicted_runtime_s, got.prediction_source) == (900.0, "user")
