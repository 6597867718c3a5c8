"""A launch failure the cloud reports late, as a real Auto Scaling group does: the reconcile loop
against moto's server with its outcomes 40 s late (provisioner/testing/asg_activities.py), on
one ManualClock shared by the controller and the stand-in.

Expected values come from the cloud's own records (the groups' DesiredCapacity, read with
boto3) and from the stand-in's switches, never from the controller's accounting."""

from __future__ import annotations

from typing import Any

import pytest
from reconcile_world import (
    CONTROLLER,
    REGION,
    TICK,
    aws_client,
    make_controller,
    make_fake,
    start_clock,
)

from provisioner.domain.intents import IntentKind, IntentStatus

pytestmark = pytest.mark.aws

TYPE = "p4d.24xlarge"


def desired_by_group(endpoint: str) -> dict[str, int]:
    asg = aws_client("autoscaling", endpoint)
    groups = asg.describe_auto_scaling_groups()["AutoScalingGroups"]
    return {
        g["AutoScalingGroupName"]: int(g["DesiredCapacity"])
        for g in groups
        if g["AutoScalingGroupName"].startswith(CONTROLLER)
    }


def test_a_late_launch_failure_shrinks_the_group_backs_off_and_says_why(
    db_url: str, moto: Any
) -> None:
    clock = start_clock()
    t0 = clock.now().timestamp()
    moto.use_clock(clock.now)  # the cloud's clock runs with the controller's
    moto.set_result_delay(40)  # AWS reports the stockout 40 s after the resize
    moto.set_capacity(REGION, TYPE, 0)
    fake = make_fake(clock, t0)
    c = make_controller(db_url, clock, fake, moto.endpoint)

    first = c.reconciler.run_pass()
    # The cloud took the resize and has not answered the launch yet: placed, as far as known.
    assert first.nodes_placed == 1
    (asked,) = c.store.intents(kind=IntentKind.SCALE_UP, status=IntentStatus.CONFIRMED)
    assert asked.result["added"] == 1
    (group,) = [g for g, n in desired_by_group(moto.endpoint).items() if n == 1]

    clock.advance(TICK)  # 60 s: the failure is out
    second = c.reconciler.run_pass()
    desired = desired_by_group(moto.endpoint)
    assert desired[group] == 0, "the failed group keeps asking: it fills later, behind the plan"
    settled = c.store.intent(asked.token)
    assert settled is not None and settled.result["added"] == 0
    assert settled.result["shortfall_code"] == "capacity:InsufficientInstanceCapacity"
    assert any(str(k) == asked.offer for k in c.reconciler.backoff.entries)
    (said,) = c.store.decisions(reason="launch_failed")
    assert said.decision.detail["nodes_lost"] == "1"
    assert "do not have sufficient" in said.decision.detail["error"]  # AWS's own words
    assert any("launch failed late" in w for w in second.warnings)

    # The next offer (on-demand, same stocked-out type) is tried in the same pass and fails
    # late too; at no point does any group hold more than the one node the job needs.
    clock.advance(TICK)
    c.reconciler.run_pass()
    assert sum(desired_by_group(moto.endpoint).values()) == 0
    assert len(c.store.decisions(reason="launch_failed")) == 2


def test_a_denied_permission_pauses_the_pool_with_an_alert_until_an_operator_undrains_it(
    db_url: str, moto: Any
) -> None:
    clock = start_clock()
    t0 = clock.now().timestamp()
    moto.use_clock(clock.now)
    moto.set_result_delay(30)  # AWS reports the denial 30 s after the resize
    moto.set_launch_error(REGION, TYPE, "permission")
    fake = make_fake(clock, t0)
    c = make_controller(db_url, clock, fake, moto.endpoint)

    c.reconciler.run_pass()
    clock.advance(TICK)
    c.reconciler.run_pass()  # the denial is out: the pool stops buying
    pool = c.store.pool("burst")
    assert pool is not None and pool.drained and "denied a permission" in pool.drained_by
    (alert,) = c.store.decisions(reason="pool_paused")
    assert alert.decision.detail["alert"] == "true"
    assert "not authorized" in alert.decision.detail["error"]  # AWS's own words
    assert sum(desired_by_group(moto.endpoint).values()) == 0

    for _ in range(3):  # no retry as if capacity would come back: nothing is asked again
        clock.advance(TICK)
        c.reconciler.run_pass()
    assert sum(desired_by_group(moto.endpoint).values()) == 0
    assert len(c.store.decisions(reason="pool_paused")) == 1

    moto.set_launch_error(REGION, TYPE, None)  # the operator grants the access ...
    c.store.set_pool_drained("burst", False, clock.now().timestamp(), by="ops")  # ... undrains
    for _ in range(3):
        clock.advance(TICK)
        c.reconciler.run_pass()
    assert sum(desired_by_group(moto.endpoint).values()) == 1  # the job's node is bought
