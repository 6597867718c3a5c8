"""Issue 31: the controller records every job it sees into the jobs table, as Slurm shows it:
submit, start and end from the (fake, in-memory) Slurm's own job records, the state, where it
ran, its team; it survives a restart, and a job Slurm forgets unseen is closed as `gone`.
Expected values come from the fake Slurm's records, not from the table's code."""

from __future__ import annotations

from datetime import UTC, datetime

from provisioner.bootstrap import SlurmParts, build_controller, load_settings
from provisioner.clock import ManualClock
from provisioner.config.loader import policy_from_mapping
from provisioner.demo.fake_slurm import FakeSlurm
from provisioner.store import Store

T0 = 1_768_046_400.0  # 2026-01-10T12:00:00Z
TICK = 15.0
POLICY = {
    "controller": "burst-jobs",
    "budgets": {"team_of_account": {"cv-lab": "vision"}},
}


def controller(url: str, clock: ManualClock, fake: FakeSlurm):
    return build_controller(
        load_settings(store_url=url, slurm_mode="none", api_port=0, tick_s=TICK),
        clock=clock,
        store=Store(url),
        policy=policy_from_mapping(POLICY, "jobs policy"),
        slurm=SlurmParts(observer=fake, node_control=fake, job_control=fake),
        clouds={},
    )


def test_a_job_is_recorded_pending_running_and_ended_and_survives_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 'ctl.sqlite'}"
    clock = ManualClock(datetime.fromtimestamp(T0, UTC))
    fake = FakeSlurm(clock, onprem_nodes=1, gpus_per_node=8)
    hog = fake.submit(8, 600.0, account="cv-lab", user="ann", time_limit_s=3600.0)
    waits = fake.submit(4, 300.0, account="cv-lab", user="bob", time_limit_s=1800.0)
    ctl = controller(url, clock, fake)
    ctl.reconciler.run_pass()
    first = ctl.store.job_record(waits)
    assert first is not None and first.state == "pending" and first.start_ts is None
    assert (first.submit_ts, first.gpus, first.user, first.team) == (T0, 4, "bob", "vision")
    assert first.time_limit_s == 1800.0
    running = ctl.store.job_record(hog)
    truth = fake.jobs[hog]
    assert running is not None and running.state == "running"
    assert running.nodes == (truth.node,) and running.start_ts == truth.start_ts
    ctl.store.close()

    clock.advance(700.0)  # the hog ends at 600 s, the other job starts then
    ctl = controller(url, clock, fake)  # a restart: the table is in the store
    ctl.reconciler.run_pass()
    ended = ctl.store.job_record(hog)
    assert ended is not None and ended.state == "completed"
    assert (ended.start_ts, ended.end_ts) == (fake.jobs[hog].start_ts, fake.jobs[hog].end_ts)
    assert ended.first_seen_ts == T0  # kept across the restart
    started = ctl.store.job_record(waits)
    assert started is not None and started.state == "running"
    assert started.start_ts == fake.jobs[waits].start_ts
    assert started.waited_s == fake.jobs[waits].start_ts - T0

    # Slurm forgets a finished job after MinJobAge; one the controller saw running and never
    # saw end (it ends at 900 s, and the next pass is at 1,700 s) is closed as gone, at the
    # pass that missed it.
    fake.min_job_age_s = 60.0
    clock.advance(1000.0)
    ctl.reconciler.run_pass()
    assert all(j.job_id != waits for j in fake.observe().jobs)
    gone = ctl.store.job_record(waits)
    assert gone is not None and gone.state == "gone" and gone.end_ts == clock.now().timestamp()
    ctl.store.close()


def test_a_pass_writes_only_the_jobs_that_changed_and_nothing_without_a_listing():
    from provisioner.config.models import Policy
    from provisioner.domain.jobs import Job, JobState
    from provisioner.domain.nodes import Node, NodeKind
    from provisioner.domain.snapshot import ClusterSnapshot
    from provisioner.reconcile.jobs_step import JobsRecorder
    from provisioner.store.memory import MemoryJobHistory

    table = MemoryJobHistory()
    rec = JobsRecorder(table, Policy())
    node = Node("gpu-1", NodeKind.ONPREM, 8)
    queue = tuple(Job(str(i), 1, T0) for i in range(500))
    assert rec.record(ClusterSnapshot(T0, queue, (node,)), T0) == 500
    assert rec.record(ClusterSnapshot(T0 + TICK, queue, (node,)), T0 + TICK) == 0
    started = Job("7", 1, T0, state=JobState.RUNNING, start_ts=T0 + 20, nodes=("gpu-1",))
    moved = (*queue[:7], started, *queue[8:])
    assert rec.record(ClusterSnapshot(T0 + 2 * TICK, moved, (node,)), T0 + 2 * TICK) == 1
    # a stale snapshot, or one with no Slurm nodes (no scheduler wired), is no listing
    assert rec.record(ClusterSnapshot(T0 + 3 * TICK, (), (node,), stale=True), T0 + 45) == 0
    assert rec.record(ClusterSnapshot(T0 + 4 * TICK, (), ()), T0 + 60) == 0
    assert len(table.job_records(states={"pending"})) == 499
