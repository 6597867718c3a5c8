"""A node group that acts on its own ends members with their jobs and launches instances
nobody asked for. Held against the AWS port over moto's server, with the stand-in running the
Auto Scaling processes moto only names (provisioner/testing/asg_autonomy.py, docs/clouds.md
"Groups that act on their own"): AZRebalance, ReplaceUnhealthy and Capacity Rebalancing.

What counts is the cloud's own record: which instances run before and after."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cloud_envs import CloudEnv, aws_env

from provisioner.act.ports import request_token
from provisioner.testing import asg_autonomy

pytestmark = pytest.mark.aws

REGION = "us-east-1"


@pytest.fixture
def aws(moto_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudEnv]:
    env = aws_env(moto_server, monkeypatch)
    yield env
    moto_server.reset()


def running_group(cloud: CloudEnv, **spec: Any) -> tuple[str, set[str]]:
    s = cloud.make_spec(**spec)
    cloud.driver.ensure(s)
    cloud.capacity.resize(s, 2, request_token("two members"))
    members = set(cloud.live(s.controller))
    assert len(members) == 2
    return s.group_name, members


def test_the_group_never_rebalances_zones_by_ending_a_member(aws: CloudEnv) -> None:
    group, members = running_group(aws)
    assert asg_autonomy.rebalance(REGION, group) is None
    assert set(aws.live("contract-ctl")) == members


def test_the_group_never_replaces_a_member_on_its_own(aws: CloudEnv) -> None:
    group, members = running_group(aws)
    assert asg_autonomy.replace_unhealthy(REGION, group, sorted(members)[0]) is None
    assert set(aws.live("contract-ctl")) == members


def test_a_spot_group_never_swaps_a_member_on_a_rebalance_recommendation(aws: CloudEnv) -> None:
    group, members = running_group(aws)  # the contract spec is spot
    assert asg_autonomy.capacity_rebalance(REGION, group, sorted(members)[0]) is None
    assert set(aws.live("contract-ctl")) == members


def test_a_group_made_before_this_version_stops_acting_on_its_own(aws: CloudEnv) -> None:
    """A group an older controller made (every process running, CapacityRebalance on) is
    brought in line by the next ensure."""
    import boto3

    group, members = running_group(aws)
    asg = boto3.client("autoscaling", endpoint_url=aws_endpoint(aws), region_name=REGION)
    asg.resume_processes(AutoScalingGroupName=group)
    asg.update_auto_scaling_group(
        AutoScalingGroupName=group, CapacityRebalance=True, NewInstancesProtectedFromScaleIn=False
    )
    asg.set_instance_protection(
        AutoScalingGroupName=group, InstanceIds=sorted(members), ProtectedFromScaleIn=False
    )
    aws.driver.ensure(aws.make_spec())
    (g,) = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"]
    assert {"AZRebalance", "ReplaceUnhealthy"} <= {
        p["ProcessName"] for p in g["SuspendedProcesses"]
    }
    assert not g.get("CapacityRebalance")
    assert g["NewInstancesProtectedFromScaleIn"]
    assert all(i["ProtectedFromScaleIn"] for i in g["Instances"])
    victim = sorted(members)[0]
    assert asg_autonomy.rebalance(REGION, group) is None
    assert asg_autonomy.replace_unhealthy(REGION, group, victim) is None
    assert asg_autonomy.capacity_rebalance(REGION, group, victim) is None
    assert set(aws.live("contract-ctl")) == members


def test_a_resize_down_never_ends_a_running_member_but_the_controller_still_can(
    aws: CloudEnv,
) -> None:
    """A resize below the members a group runs (the shrink after a partial fill, taken
    while a launch completed in between) must not pick a running member to end: members are
    protected from scale-in. Ending one by name (TerminateInstanceInAutoScalingGroup, how the
    controller ends a drained node) still works, as AWS documents ("Use instance scale-in
    protection": it does not protect from that call)."""
    spec = aws.make_spec()
    _, members = running_group(aws)
    aws.capacity.resize(spec, 1, request_token("shrink below the members"))
    assert set(aws.live("contract-ctl")) == members  # no running member ended
    owned = {o.instance_id: o for o in aws.capacity.list_owned("contract-ctl")}
    victim = sorted(members)[0]
    aws.capacity.terminate(owned[victim], request_token("end", victim))
    assert set(aws.live("contract-ctl")) == members - {victim}


def test_the_stand_in_acts_as_aws_while_the_processes_run(aws: CloudEnv) -> None:
    """The switches themselves: on a group whose processes run (resumed by hand), each one
    ends a member and launches one nobody asked for."""
    import boto3

    group, members = running_group(aws)
    asg = boto3.client("autoscaling", endpoint_url=aws_endpoint(aws), region_name=REGION)
    asg.resume_processes(AutoScalingGroupName=group)
    asg.update_auto_scaling_group(AutoScalingGroupName=group, CapacityRebalance=True)
    swapped = asg_autonomy.rebalance(REGION, group)
    assert swapped is not None
    new, ended = swapped
    live = set(aws.live("contract-ctl"))
    assert ended in members and ended not in live and new in live and len(live) == 2
    victim = sorted(live)[0]
    replacement = asg_autonomy.replace_unhealthy(REGION, group, victim)
    assert replacement is not None and victim not in set(aws.live("contract-ctl"))
    at_risk = sorted(set(aws.live("contract-ctl")))[0]
    fresh = asg_autonomy.capacity_rebalance(REGION, group, at_risk)
    live = set(aws.live("contract-ctl"))
    assert fresh in live and at_risk not in live and len(live) == 2


def aws_endpoint(cloud: CloudEnv) -> str:
    return str(cloud.capacity.clients.endpoint_url)  # type: ignore[attr-defined]
