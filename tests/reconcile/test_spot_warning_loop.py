"""A spot warning through the whole pass: moto's stand-in gives the 2-minute notice (on the
controller's clock), the node's report reaches the inbox, and the controller signals the job,
requeues it and ends the instance before EC2 takes it. Expected values come from moto's own
records (the instance's state, the notice's time) and the fake Slurm's record of signals and
requeues; the windows are worked by hand from the policy (checkpoint 20 s, margin 5 s)."""

from __future__ import annotations

from typing import Any

import pytest
from reconcile_world import REGION, TICK, aws_client, make_controller, make_fake, start_clock

from provisioner.domain.instances import InstanceState
from provisioner.domain.jobs import JobState
from provisioner.domain.plan import ReasonCode
from provisioner.domain.spot_warnings import SpotWarning, WarningKind

pytestmark = pytest.mark.aws
S = InstanceState


def ec2_state(endpoint: str, iid: str) -> tuple[str, str]:
    (res,) = aws_client("ec2", endpoint).describe_instances(InstanceIds=[iid])["Reservations"]
    inst = res["Instances"][0]
    return inst["State"]["Name"], inst.get("PrivateIpAddress", "")


def test_an_interruption_notice_requeues_the_job_and_ends_the_instance_inside_the_window(
    db_url: str, moto: Any
) -> None:
    clock = start_clock()
    t0 = clock.now().timestamp()
    moto.use_clock(clock.now)
    fake = make_fake(clock, t0)
    c = make_controller(db_url, clock, fake, moto.endpoint)
    for _ in range(5):  # scale up, bind, boot (120 s), join: the burst job runs on burst-1
        c.reconciler.run_pass()
        clock.advance(TICK)
    c.reconciler.run_pass()
    (si,) = c.store.instances(live_only=True)
    iid = si.instance.instance_id
    assert (si.instance.state, si.instance.node_name) == (S.READY, "burst-1")
    assert fake.with_job("1002").state is JobState.RUNNING

    # EC2 gives the notice; the node's watcher reports it from the instance's own address
    moto.warn_spot(iid, REGION)  # taken 120 s from now, on the stand-in's clock
    notice = clock.now().timestamp()
    _, ip = ec2_state(moto.endpoint, iid)
    inbox = c.reconciler.deps.spot_inbox
    inbox.post(SpotWarning("burst-1", iid, WarningKind.INTERRUPTION, notice, notice + 120, ip))

    first = c.reconciler.run_pass()
    assert not first.errors
    assert [(j, sig) for j, sig, _ in fake.signals] == [("1002", "USR1")]
    assert fake.with_job("1002").state is JobState.RUNNING  # it has its checkpoint time
    assert c.reconciler.wake_at == notice + 20  # the loop comes back for the requeue then
    assert ec2_state(moto.endpoint, iid)[0] == "running"

    clock.advance(20)
    second = c.reconciler.run_pass()
    assert not second.errors and second.terminated == 1
    # back in the queue once (Slurm may place it on another node at once)
    assert [(j, n) for j, n, _, _, _ in fake.requeues] == [("1002", "burst-1")]
    assert fake.with_job("1002").node != "burst-1"
    assert ec2_state(moto.endpoint, iid)[0] in ("shutting-down", "terminated")
    (d,) = c.store.decisions(reason=ReasonCode.SPOT_WARNING.value)
    assert d.decision.instance == iid and "interruption" in d.decision.detail["why"]

    clock.advance(100)  # EC2's time comes: nothing of ours is left to take
    assert moto.take_due_spot() == [iid]
    c.reconciler.run_pass()
    final = c.store.instance(iid)
    assert final is not None and final.instance.state is S.TERMINATED
    assert final.ended_ts is not None and final.ended_ts <= notice + 120
    clock.advance(TICK)
    c.reconciler.run_pass()
    assert inbox.held() == {}  # the record closed: the next pass forgets its warning


def test_a_rebalance_recommendation_drains_the_node_and_lets_its_job_finish(
    db_url: str, moto: Any
) -> None:
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0, burst_runtime_s=300)
    c = make_controller(db_url, clock, fake, moto.endpoint)
    for _ in range(5):
        c.reconciler.run_pass()
        clock.advance(TICK)
    (si,) = c.store.instances(live_only=True)
    iid = si.instance.instance_id
    _, ip = ec2_state(moto.endpoint, iid)
    now = clock.now().timestamp()
    c.reconciler.deps.spot_inbox.post(
        SpotWarning("burst-1", iid, WarningKind.REBALANCE, now, None, ip)
    )
    c.reconciler.run_pass()
    assert ("power_down_asap", "burst-1") in fake.calls
    assert fake.signals == [] and fake.requeues == []
    for _ in range(10):
        clock.advance(TICK)
        c.reconciler.run_pass()
    assert fake.with_job("1002").state is JobState.COMPLETED  # finished, never requeued
    assert fake.requeues == []
    assert c.store.instance(iid).instance.state is S.TERMINATED
