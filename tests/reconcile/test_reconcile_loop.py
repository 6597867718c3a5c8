"""The reconcile loop against moto's server and the fake Slurm cluster, on a ManualClock:
the whole lifecycle of a burst, fallback and back-off, pause, pool drain, stale snapshots and
the orphan sweep."""

from __future__ import annotations

from decimal import Decimal

import pytest
from reconcile_world import (
    CONTROLLER,
    GRACE,
    POOL,
    TICK,
    books,
    live_instances,
    make_controller,
    make_fake,
    policy,
    start_clock,
)

from provisioner.act.ports import PoolSpec
from provisioner.domain.errors import SnapshotError
from provisioner.domain.instances import InstanceState
from provisioner.domain.jobs import JobState
from provisioner.domain.offers import CapacityType
from provisioner.domain.plan import ReasonCode

pytestmark = pytest.mark.aws
S = InstanceState


def run(c, clock, passes: int):
    reports = []
    for _ in range(passes):
        reports.append(c.reconciler.run_pass())
        clock.advance(TICK)
    return reports


def live(c):
    return c.store.instances(live_only=True)


def test_burst_runs_the_job_then_drains_terminates_and_bills(db_url, moto):
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    c = make_controller(db_url, clock, fake, moto.endpoint)

    first = c.reconciler.run_pass()
    assert first.scale_ups == 1 and first.nodes_placed == 1 and first.adopted == 1
    assert first.jobs_moved == 1 and not first.errors
    (si,) = live(c)
    inst = si.instance
    assert inst.state is S.ALLOCATED and inst.pool == POOL and si.team == "vision"
    assert inst.offer.capacity is CapacityType.SPOT and inst.price_usd_hr == Decimal("7.246")
    assert [i["InstanceId"] for i in live_instances(moto.endpoint)] == [inst.instance_id]
    # the job may now run in the cloud partition: the fake Slurm powers a CLOUD node up for it
    assert ("partition", "1002=onprem,cloud") in fake.calls
    assert ("power_up", "burst-1") in fake.calls
    decisions = c.store.decisions(reason=ReasonCode.BURST_WAIT_EXCEEDS_BUDGET)
    assert [d.decision.job_ids for d in decisions] == [("1002",)]

    clock.advance(TICK)
    run(c, clock, 1)  # bound to the node Slurm powers up; the launcher boots it
    inst = c.store.instance(inst.instance_id).instance
    assert (inst.state, inst.node_name) == (S.JOINING, "burst-1")
    run(c, clock, 3)  # boot (120 s) -> node registers -> ready, the job runs there
    assert c.store.instance(inst.instance_id).instance.state is S.READY
    job = fake.with_job("1002")
    assert job.state is JobState.RUNNING and job.node == "burst-1"

    run(c, clock, 15)  # 900 s of work, then 300 s idle -> drain -> powered down -> terminate
    assert fake.with_job("1002").state is JobState.COMPLETED
    run(c, clock, 10)
    final = c.store.instance(inst.instance_id)
    steps = [t.to_state for t in final.instance.history]
    assert steps == [
        S.REQUESTED,
        S.ALLOCATED,
        S.JOINING,
        S.READY,
        S.DRAINING,
        S.TERMINATING,
        S.TERMINATED,
    ]
    assert live_instances(moto.endpoint) == []
    assert ("power_down_asap", "burst-1") in fake.calls
    assert c.store.pending_intents() == []

    b = books(c.store)
    assert b.ledger > 0 and abs(b.ledger - b.expected) < Decimal("0.01")
    jobs = c.store.ledger_entries(job_id="1002")
    assert jobs and all(e.kind == "job" and e.team == "vision" for e in jobs if e.instance_id)
    # the job paid for its GPU-seconds on the burst node, the rest is idle
    job_cost = sum(e.cost for e in jobs if e.instance_id == inst.instance_id)
    assert abs(job_cost - Decimal("7.246") * 900 / 3600) < Decimal("0.01")


def test_capacity_error_falls_back_to_on_demand_and_backoff_survives_restart(db_url, moto):
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    url = db_url
    moto.set_capacity("us-east-1", "p4d.24xlarge", 0)  # spot and on-demand share the pool...
    c = make_controller(url, clock, fake, moto.endpoint)
    r = c.reconciler.run_pass()
    assert r.nodes_placed == 0 and r.scale_ups == 1
    failed = c.store.failed_intent_counts()
    assert sum(failed.values()) == 2 and all(k.startswith("capacity:") for k in failed)
    assert len(c.reconciler.backoff.entries) == 2  # spot and on-demand both backed off

    # a restart rebuilds the back-off from the stored outcomes
    c2 = make_controller(url, clock, fake, moto.endpoint)
    assert set(c2.reconciler.backoff.entries) == set(c.reconciler.backoff.entries)
    clock.advance(TICK)
    r2 = c2.reconciler.run_pass()
    assert r2.scale_ups == 0
    assert c2.store.decisions(reason=ReasonCode.BLOCKED_BACKOFF)
    assert live_instances(moto.endpoint) == []


def test_partial_capacity_takes_the_next_offer(db_url, moto):
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    fake.submit(8, 900.0, submit_ts=t0 - 5, account="acct-v", time_limit_s=1200)
    moto.add_fault(
        "SetDesiredCapacity",
        "InsufficientInstanceCapacity",
        service="autoscaling",
        match="AutoScalingGroupName=" + _group("spot"),
    )
    c = make_controller(db_url, clock, fake, moto.endpoint)
    r = c.reconciler.run_pass()
    assert r.nodes_placed == 2 and not [e for e in r.errors if "scale-up" in e]
    caps = {si.instance.offer.capacity for si in live(c)}
    assert caps == {CapacityType.ON_DEMAND}
    assert len(live_instances(moto.endpoint)) == 2


def _group(cap: str) -> str:
    spec = PoolSpec(
        pool=POOL,
        cloud="aws",
        region="us-east-1",
        instance_type="p4d.24xlarge",
        capacity=CapacityType.SPOT if cap == "spot" else CapacityType.ON_DEMAND,
        gpu_model="A100",
        gpus=8,
        max_size=2,
        image="ami-12c6146b",
        controller=CONTROLLER,
    )
    return spec.group_name


def test_pause_blocks_bursting_and_a_drained_pool_takes_no_nodes(db_url, moto):
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    c = make_controller(db_url, clock, fake, moto.endpoint)
    c.store.set_paused(True, t0, by="test", reason="maintenance")
    r = c.reconciler.run_pass()
    assert r.scale_ups == 0 and live_instances(moto.endpoint) == []
    assert c.store.decisions(reason=ReasonCode.BLOCKED_PAUSED)
    c.store.set_paused(False, t0, by="test")
    c.store.set_pool_drained(POOL, True, t0, by="test")
    clock.advance(TICK)
    r = c.reconciler.run_pass()
    assert r.scale_ups == 0 and live_instances(moto.endpoint) == []
    assert c.store.decisions(reason=ReasonCode.BLOCKED_POOL_MAX)
    c.store.set_pool_drained(POOL, False, t0, by="test")
    clock.advance(TICK)
    assert c.reconciler.run_pass().nodes_placed == 1


class _Broken:
    def observe(self):
        raise SnapshotError("squeue --json: timed out after 15 s")


def test_stale_snapshot_changes_nothing_in_slurm_or_the_cloud(db_url, moto):
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    url = db_url
    c = make_controller(url, clock, fake, moto.endpoint)
    run(c, clock, 5)  # burst node ready, the job runs
    (si,) = live(c)
    assert si.instance.state is S.READY
    c.reconciler.deps.observer = _Broken()
    calls = len(fake.calls)
    reports = run(c, clock, 40)  # far past the idle timeout and every grace period
    assert all(r.stale for r in reports)
    assert [r.scale_ups + r.terminated + r.drained for r in reports] == [0] * 40
    assert len(fake.calls) == calls
    assert c.store.instance(si.instance.instance_id).instance.state is S.READY
    assert len(live_instances(moto.endpoint)) == 1
    assert c.store.decisions(reason=ReasonCode.BLOCKED_STALE_SNAPSHOT)


def test_orphan_is_swept_after_the_grace_period(db_url, moto):
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    fake.jobs["1002"].state = JobState.CANCELLED  # nothing to burst for
    c = make_controller(db_url, clock, fake, moto.endpoint)
    moto.use_clock(clock.now)  # the cloud stamps its launches on the test's clock
    import boto3

    ec2 = boto3.client(
        "ec2",
        endpoint_url=moto.endpoint,
        region_name="us-east-1",
        aws_access_key_id="t",
        aws_secret_access_key="t",
    )
    stray = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType="p4d.24xlarge",
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "controller", "Value": CONTROLLER}]}
        ],
    )["Instances"][0]["InstanceId"]
    other = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType="p4d.24xlarge",
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "controller", "Value": "someone-else"}]}
        ],
    )["Instances"][0]["InstanceId"]
    launched = ec2.describe_instances(InstanceIds=[stray])["Reservations"][0]["Instances"][0][
        "LaunchTime"
    ].timestamp()
    # the injected clock started before the launch; keep it at or past the cloud's launch time
    clock.advance(max(0.0, launched - clock.now().timestamp()))
    c.reconciler.run_pass()
    assert stray in {i["InstanceId"] for i in live_instances(moto.endpoint)}  # within grace
    clock.advance(GRACE + 1)
    r = c.reconciler.run_pass()
    assert r.terminated == 1
    assert live_instances(moto.endpoint) == []
    state = ec2.describe_instances(InstanceIds=[other])["Reservations"][0]["Instances"][0]
    assert state["State"]["Name"] == "running"  # another controller's: never touched
    # the orphan got a record from its tags first, so its running time is in the books
    (si,) = c.store.instances()
    assert si.instance.instance_id == stray and si.instance.origin == "orphan"
    assert si.instance.launched_ts == launched  # the cloud's own launch time
    clock.advance(GRACE + 1)
    c.reconciler.run_pass()
    si = c.store.instance(stray)
    assert si is not None and si.instance.state is S.TERMINATED
    rows = c.store.ledger_entries(instance_id=stray)
    assert {e.kind for e in rows} == {"orphan"}
    ran = max(60.0, (si.ended_ts or 0) - launched)  # billed per second, 60 s at least
    # p4d.24xlarge on-demand in us-east-1, from the shipped catalog (policies/catalog)
    expected = Decimal("21.95764") * Decimal(repr(ran)) / 3600
    assert abs(sum(e.cost for e in rows) - expected) < Decimal("0.000002")


def test_the_sweep_holds_when_store_and_cloud_disagree_about_many(db_url, moto):
    """A wrong or restored store: six tagged machines with no record. Nothing is terminated
    until an operator approves; the hold shows in the store's operator state."""
    clock = start_clock()
    fake = make_fake(clock, clock.now().timestamp())
    fake.jobs["1002"].state = JobState.CANCELLED
    c = make_controller(db_url, clock, fake, moto.endpoint)
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=moto.endpoint, region_name="us-east-1",
                       aws_access_key_id="t", aws_secret_access_key="t")  # fmt: skip
    ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=6, MaxCount=6, InstanceType="p4d.24xlarge",
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "controller", "Value": CONTROLLER}]}
        ],
    )  # fmt: skip
    launched = max(i["LaunchTime"].timestamp() for i in live_instances(moto.endpoint))
    clock.advance(max(0.0, launched - clock.now().timestamp()))
    c.reconciler.run_pass()  # first listed now: the grace counts from here
    clock.advance(GRACE + 1)
    r = c.reconciler.run_pass()
    assert r.terminated == 0 and "disagree about 6 instances" in r.sweep_held
    assert len(live_instances(moto.endpoint)) == 6
    assert "disagree" in c.store.operator_state().sweep_hold_reason
    clock.advance(30)
    assert c.reconciler.run_pass().terminated == 0  # still held: it waits for an operator
    c.store.approve_sweep(clock.now().timestamp(), by="ops")
    clock.advance(30)
    r = c.reconciler.run_pass()
    assert r.terminated == 6 and r.sweep_held == ""
    assert live_instances(moto.endpoint) == []
    assert c.store.operator_state().sweep_hold_reason == ""


def test_restart_resumes_from_store_and_world(db_url, moto):
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    url = db_url
    c = make_controller(url, clock, fake, moto.endpoint)
    run(c, clock, 3)
    c.store.close()
    c2 = make_controller(url, clock, fake, moto.endpoint, pol=policy())
    run(c2, clock, 30)
    assert [si.instance.state for si in c2.store.instances()] == [S.TERMINATED]
    assert live_instances(moto.endpoint) == []
    b = books(c2.store)
    assert abs(b.ledger - b.expected) < Decimal("0.01")


def test_slurm_driven_a_node_slurm_powers_up_on_its_own_gets_an_instance(db_url, moto):
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    fake.jobs["1002"].state = JobState.CANCELLED
    # submitted straight to the burst partition: Slurm powers a CLOUD node up by itself
    jid = fake.submit(8, 600.0, partition="onprem,cloud", account="acct-v", time_limit_s=900)
    c = make_controller(db_url, clock, fake, moto.endpoint)
    r = c.reconciler.run_pass()
    assert r.nodes_placed == 1 and r.jobs_moved == 0
    (d,) = c.store.decisions(reason=ReasonCode.BURST_URGENT)
    assert d.decision.detail["by"] == "slurm" and d.decision.job_ids == (jid,)
    run(c, clock, 6)
    (si,) = c.store.instances()
    assert (si.instance.state, si.instance.node_name) == (S.READY, "burst-1")
    assert fake.with_job(jid).node == "burst-1"
    assert len(live_instances(moto.endpoint)) == 1  # one node asked for, one instance


def test_scale_down_waits_for_nvml_to_confirm_the_gpus_idle(db_url, moto):
    from provisioner.domain.nodes import GpuSample

    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    c = make_controller(
        db_url,
        clock,
        fake,
        moto.endpoint,
        pol=policy(require_nvml_idle=True),
    )
    run(c, clock, 30)  # the job ran and ended long ago; no agent has reported
    (si,) = live(c)
    assert si.instance.state is S.READY
    keep = c.store.decisions(reason=ReasonCode.KEEP_GPU_BUSY)
    assert keep and keep[0].decision.detail["why"] == "no NVML sample"

    def push(util: float) -> None:
        now = clock.now().timestamp()
        samples = [GpuSample(i, f"GPU-{i}", util, sampled_ts=now) for i in range(8)]
        c.store.upsert_telemetry("burst-1", samples, now)

    push(97.0)  # busy by NVML (a process Slurm does not know about): kept
    run(c, clock, 1)
    assert live(c)[0].instance.state is S.READY
    push(0.0)
    for _ in range(8):
        push(0.0)
        run(c, clock, 1)
    assert c.store.instance(si.instance.instance_id).instance.state is S.TERMINATED
    assert live_instances(moto.endpoint) == []
