"""AWS: the real boto3 over HTTP against moto's server on 127.0.0.1, behind the fault layer."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from cloud_helpers import ATTEMPTS, CONTROLLER, AwsEnv, aws_spec

from provisioner.act.backoff_feed import BackoffSettings
from provisioner.act.ports import COST_TAGS, CloudPorts, CloudState, OwnedInstance
from provisioner.act.scale_up import scale_up_with_fallback
from provisioner.act.sweep import SweepReason, plan_sweep
from provisioner.act.terminate import terminate_instance
from provisioner.domain.errors import AuthError, CapacityError, QuotaError, ThrottlingError
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.offers import CapacityType
from provisioner.plan.backoff import Backoff

pytestmark = pytest.mark.aws

NOW = 1_800_000_000.0
SETTINGS = BackoffSettings(initial_s=300, max_s=3600)


def instances(env: AwsEnv, **filters: str) -> list[dict[str, Any]]:
    def name(key: str) -> str:
        return "tag:" + key[4:] if key.startswith("tag_") else key.replace("_", "-")

    flt = [{"Name": name(k), "Values": [v]} for k, v in filters.items()]
    flt.append({"Name": "instance-state-name", "Values": ["pending", "running"]})
    res = env.ec2().describe_instances(Filters=flt)["Reservations"]
    return [i for r in res for i in r["Instances"]]


def group(env: AwsEnv, name: str) -> dict[str, Any]:
    groups = env.asg().describe_auto_scaling_groups(AutoScalingGroupNames=[name])
    return groups["AutoScalingGroups"][0]


def ports(env: AwsEnv) -> dict[str, CloudPorts]:
    return {"aws": CloudPorts(env.driver, env.capacity)}


def test_pool_is_created_with_guardrails_and_tags(aws: AwsEnv) -> None:
    spec = aws_spec()
    aws.driver.ensure(spec)
    aws.driver.ensure(spec)  # idempotent: nothing new on a second pass

    lts = aws.ec2().describe_launch_templates()["LaunchTemplates"]
    assert [lt["LaunchTemplateName"] for lt in lts] == [spec.group_name]
    assert lts[0]["LatestVersionNumber"] == 1
    data = aws.ec2().describe_launch_template_versions(LaunchTemplateName=spec.group_name)[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    assert data["InstanceType"] == "p4d.24xlarge"
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
    assert data["NetworkInterfaces"][0]["AssociatePublicIpAddress"] is False
    assert data["InstanceMarketOptions"]["MarketType"] == "spot"
    assert base64.b64decode(data["UserData"]).decode() == spec.user_data
    inst_tags = {t["Key"]: t["Value"] for t in data["TagSpecifications"][0]["Tags"]}
    assert all(inst_tags[k] for k in COST_TAGS)

    g = group(aws, spec.group_name)
    assert (g["MinSize"], g["MaxSize"], g["DesiredCapacity"]) == (0, 4, 0)
    assert g["LaunchTemplate"]["LaunchTemplateName"] == spec.group_name
    tags = {t["Key"]: (t["Value"], t["PropagateAtLaunch"]) for t in g["Tags"]}
    assert tags["controller"] == (CONTROLLER, True)
    assert tags["team"] == ("vision", True)
    assert tags["decision"] == (spec.decision_id, True)


def test_shape_change_makes_a_new_default_version_and_max_follows_policy(aws: AwsEnv) -> None:
    aws.driver.ensure(aws_spec())
    aws.driver.ensure(aws_spec(image="ami-0new", max_size=6))
    lt = aws.ec2().describe_launch_templates()["LaunchTemplates"][0]
    assert (lt["LatestVersionNumber"], lt["DefaultVersionNumber"]) == (2, 2)
    assert group(aws, aws_spec().group_name)["MaxSize"] == 6


def test_scale_up_and_down_really_changes_moto_instances(aws: AwsEnv) -> None:
    spec = aws_spec()
    aws.driver.ensure(spec)
    aws.capacity.resize(spec, 3, "t-1")
    live = instances(aws, tag_controller=CONTROLLER)
    assert len(live) == 3
    assert {i["InstanceType"] for i in live} == {"p4d.24xlarge"}
    tags = {t["Key"]: t["Value"] for t in live[0]["Tags"]}
    assert tags["pool"] == "aws-a100" and tags["decision"] == spec.decision_id

    owned = aws.capacity.list_owned(CONTROLLER)
    assert len(owned) == 3 and all(o.group == spec.group_name for o in owned)
    assert terminate_instance(owned[0], "d-down", aws.capacity) is None
    # terminated with decrement: the group shrinks and launches no replacement
    assert aws.capacity.group_status(spec).desired == 2
    assert len(instances(aws, tag_controller=CONTROLLER)) == 2

    # members are protected from scale-in: a resize to 0 ends none of them; ending by name does
    aws.capacity.resize(spec, 0, "t-2")
    assert len(instances(aws, tag_controller=CONTROLLER)) == 2
    for o in aws.capacity.list_owned(CONTROLLER):
        assert terminate_instance(o, "d-down", aws.capacity) is None
    assert instances(aws, tag_controller=CONTROLLER) == []
    # a later scale-up writes its decision to the group's propagated tag (on AWS the group's
    # value wins over the launch template's for new instances; moto lets the template win)
    aws.capacity.resize(aws_spec(decision_id="d-later"), 1, "t-3")
    tags = {
        t["Key"]: (t["Value"], t["PropagateAtLaunch"]) for t in group(aws, spec.group_name)["Tags"]
    }
    assert tags["decision"] == ("d-later", True)
    assert len(instances(aws, tag_controller=CONTROLLER)) == 1


def test_insufficient_capacity_on_one_type_moves_to_the_next_offer(aws: AwsEnv) -> None:
    aws.server.set_capacity("us-east-1", "p5.48xlarge", 0)
    p5, p4d = aws_spec("p5.48xlarge"), aws_spec("p4d.24xlarge")
    out = scale_up_with_fallback(
        [p5, p4d], 2, ports=ports(aws), backoff=Backoff(), now_ts=NOW, settings=SETTINGS
    )
    assert [(p.offer.instance_type, p.added) for p in out.placed] == [("p4d.24xlarge", 2)]
    assert [type(f.error) for f in out.failed] == [CapacityError]
    assert out.unplaced == 0
    assert out.backoff.blocked(p5.offer, NOW + 299) and not out.backoff.blocked(p4d.offer, NOW)
    # the stocked-out group was shrunk back, so it does not fill behind the planner's back
    assert aws.capacity.group_status(p5).desired == 0
    assert len(instances(aws, instance_type="p4d.24xlarge")) == 2
    assert instances(aws, instance_type="p5.48xlarge") == []

    # the next pass skips the backed-off offer without calling the cloud for it
    before = aws.server.hits("SetDesiredCapacity")
    again = scale_up_with_fallback(
        [p5, p4d], 1, ports=ports(aws), backoff=out.backoff, now_ts=NOW + 60, settings=SETTINGS
    )
    assert again.skipped == (p5.offer,)
    assert [p.offer for p in again.placed] == [p4d.offer]
    assert aws.server.hits("SetDesiredCapacity") == before + 1


def test_partially_filled_request_keeps_what_launched_and_places_the_rest(aws: AwsEnv) -> None:
    aws.server.set_capacity("us-east-1", "p5.48xlarge", 1)
    p5, p4d = aws_spec("p5.48xlarge"), aws_spec("p4d.24xlarge")
    out = scale_up_with_fallback(
        [p5, p4d], 3, ports=ports(aws), backoff=Backoff(), now_ts=NOW, settings=SETTINGS
    )
    assert [(p.offer.instance_type, p.added) for p in out.placed] == [
        ("p5.48xlarge", 1),
        ("p4d.24xlarge", 2),
    ]
    assert out.placed_nodes == 3
    status = aws.capacity.group_status(p5)
    assert (status.desired, status.launched) == (1, 1)
    assert out.backoff.blocked(p5.offer, NOW)
    assert len(instances(aws, instance_type="p5.48xlarge")) == 1


def test_run_instances_below_min_count_is_a_capacity_error(aws: AwsEnv) -> None:
    from botocore.exceptions import ClientError

    from provisioner.act.aws import map_aws_error

    aws.server.set_capacity("us-east-1", "p5.48xlarge", 1)
    with pytest.raises(ClientError) as exc:
        aws.ec2().run_instances(
            ImageId="ami-12c6146b", InstanceType="p5.48xlarge", MinCount=2, MaxCount=2
        )
    assert isinstance(map_aws_error(exc.value), CapacityError)


def test_throttling_is_retried_by_the_one_policy(aws: AwsEnv) -> None:
    spec = aws_spec()
    aws.driver.ensure(spec)
    aws.server.add_fault("SetDesiredCapacity", "Throttling", service="autoscaling", times=2)
    aws.server.add_fault("DescribeInstances", "RequestLimitExceeded", status=503, times=2)
    aws.capacity.resize(spec, 2, "t")
    assert aws.server.hits("SetDesiredCapacity") == 3  # botocore did not retry; tenacity did
    assert len(aws.capacity.list_owned(CONTROLLER)) == 2
    assert aws.server.hits("DescribeInstances") == 3


def test_throttling_that_persists_fails_the_offer_without_backing_it_off(aws: AwsEnv) -> None:
    spec = aws_spec()
    aws.server.add_fault("SetDesiredCapacity", "Throttling", service="autoscaling", times=99)
    out = scale_up_with_fallback(
        [spec], 1, ports=ports(aws), backoff=Backoff(), now_ts=NOW, settings=SETTINGS
    )
    assert [type(f.error) for f in out.failed] == [ThrottlingError]
    assert aws.server.hits("SetDesiredCapacity") == ATTEMPTS
    assert not out.backoff.blocked(spec.offer, NOW)


def test_quota_error_backs_off_and_the_next_offer_is_used(aws: AwsEnv) -> None:
    aws.server.add_fault(
        "CreateAutoScalingGroup",
        "LimitExceeded",
        service="autoscaling",
        match="AutoScalingGroupName=" + aws_spec("p5.48xlarge").group_name,
    )
    p5, p4d = aws_spec("p5.48xlarge"), aws_spec("p4d.24xlarge")
    out = scale_up_with_fallback(
        [p5, p4d], 1, ports=ports(aws), backoff=Backoff(), now_ts=NOW, settings=SETTINGS
    )
    assert [type(f.error) for f in out.failed] == [QuotaError]
    assert out.backoff.blocked(p5.offer, NOW)
    assert [p.offer for p in out.placed] == [p4d.offer]


def test_auth_error_is_not_retried(aws: AwsEnv) -> None:
    aws.server.add_fault("DescribeLaunchTemplates", "UnauthorizedOperation", times=9)
    with pytest.raises(AuthError):
        aws.driver.ensure(aws_spec())
    assert aws.server.hits("DescribeLaunchTemplates") == 1


def test_orphan_created_by_hand_is_swept(aws: AwsEnv) -> None:
    spec = aws_spec()
    aws.driver.ensure(spec)
    aws.capacity.resize(spec, 1, "t")
    orphan_id = aws.ec2().run_instances(
        ImageId="ami-12c6146b",
        InstanceType="p4d.24xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "controller", "Value": CONTROLLER}]}
        ],
    )["Instances"][0]["InstanceId"]
    aws.ec2().run_instances(  # someone else's instance: never ours to touch
        ImageId="ami-12c6146b", InstanceType="p4d.24xlarge", MinCount=1, MaxCount=1
    )
    owned = aws.capacity.list_owned(CONTROLLER)
    member = next(o for o in owned if o.instance_id != orphan_id)
    launched = max(o.launched_ts for o in owned)
    records = [
        _record(member.instance_id, InstanceState.READY, launched),
        _record("i-0gone000000000000", InstanceState.READY, launched),
    ]

    seen = {o.instance_id: launched for o in owned}  # listed by the controller at `launched`
    within_grace = plan_sweep(
        owned, records, controller=CONTROLLER, now_ts=launched + 10, grace_s=600, first_seen=seen
    )
    assert within_grace.terminate == () and within_grace.close == ()

    plan = plan_sweep(
        owned, records, controller=CONTROLLER, now_ts=launched + 601, grace_s=600, first_seen=seen
    )
    assert [(t.instance.instance_id, t.reason) for t in plan.terminate] == [
        (orphan_id, SweepReason.ORPHAN)
    ]
    assert [(c.instance_id, c.reason) for c in plan.close] == [
        ("i-0gone000000000000", SweepReason.INSTANCE_GONE)
    ]
    for t in plan.terminate:
        assert terminate_instance(t.instance, "sweep", aws.capacity) is None
    state = aws.ec2().describe_instances(InstanceIds=[orphan_id])["Reservations"][0]["Instances"]
    assert state[0]["State"]["Name"] in ("shutting-down", "terminated")
    owned = aws.capacity.list_owned(CONTROLLER)
    left = {o.instance_id for o in owned if o.state is not CloudState.TERMINATED}
    assert left == {member.instance_id}
    assert aws.capacity.group_status(spec).desired == 1  # the group member was not touched


def test_terminating_an_instance_that_is_gone_is_not_an_error(aws: AwsEnv) -> None:
    gone = OwnedInstance(
        instance_id="i-0123456789abcdef0",
        cloud="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="p4d.24xlarge",
        state=CloudState.RUNNING,
        launched_ts=NOW,
    )
    assert terminate_instance(gone, "d", aws.capacity) is None


def test_clients_honour_aws_endpoint_url(aws: AwsEnv) -> None:
    from provisioner.act.aws import AwsCapacity, AwsClients

    clients = AwsClients()  # no explicit endpoint: AWS_ENDPOINT_URL (moto) is used
    assert clients.ec2("us-east-1").meta.endpoint_url == aws.server.endpoint
    assert AwsCapacity(["us-east-1"], clients).list_owned(CONTROLLER) == []


def test_delete_removes_group_template_and_instances(aws: AwsEnv) -> None:
    spec = aws_spec(capacity=CapacityType.ON_DEMAND)
    aws.driver.ensure(spec)
    aws.capacity.resize(spec, 2, "t")
    aws.driver.delete(spec)
    assert not aws.capacity.group_status(spec).exists
    assert aws.ec2().describe_launch_templates()["LaunchTemplates"] == []
    assert instances(aws, tag_controller=CONTROLLER) == []
    aws.driver.delete(spec)  # deleting again is fine


def _record(instance_id: str, state: InstanceState, ts: float) -> CloudInstance:
    from decimal import Decimal

    return CloudInstance(
        instance_id=instance_id,
        pool="aws-a100",
        offer=aws_spec().offer,
        gpu_model="A100",
        gpus=8,
        price_usd_hr=Decimal("32.77"),
        state=state,
        launched_ts=ts,
    )


# ----------------------------------------------------------------------------- found by the soak


def test_a_lost_response_is_applied_but_the_caller_sees_an_error(aws: AwsEnv) -> None:
    """The fault layer's apply-then-drop: moto resizes the group, the answer never arrives."""
    spec = aws_spec()
    aws.driver.ensure(spec)
    aws.server.add_fault("SetDesiredCapacity", "InternalFailure", service="autoscaling",
                         status=500, times=1, apply=True)  # fmt: skip
    asg = aws.asg()
    with pytest.raises(Exception, match="InternalFailure"):
        asg.set_desired_capacity(AutoScalingGroupName=spec.group_name, DesiredCapacity=2)
    assert group(aws, spec.group_name)["DesiredCapacity"] == 2  # it happened
    assert len(instances(aws, tag_controller=CONTROLLER)) == 2


def test_an_instance_the_cloud_terminated_is_listed_with_its_end_time(aws: AwsEnv) -> None:
    """A spot reclaim: the listing still shows the instance, terminated, with the time EC2
    gives in its StateTransitionReason, so the controller knows it for certain and bills up
    to then even when its store never recorded it."""
    spec = aws_spec()
    aws.driver.ensure(spec)
    aws.capacity.resize(spec, 1, "t-1")
    (iid,) = [i["InstanceId"] for i in instances(aws, tag_controller=CONTROLLER)]
    aws.ec2().terminate_instances(InstanceIds=[iid])  # the cloud takes it
    (gone,) = [o for o in aws.capacity.list_owned(CONTROLLER) if o.instance_id == iid]
    raw = aws.ec2().describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
    stamp = raw["StateTransitionReason"]  # "User initiated (YYYY-MM-DD HH:MM:SS GMT|UTC)"
    expected = datetime.strptime(stamp[stamp.index("(") + 1 : stamp.index("(") + 20],
                                 "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)  # fmt: skip
    assert gone.state is CloudState.TERMINATED
    # cut to the second by EC2: the end of that second, the latest it can have stopped
    assert gone.ended_ts == expected.timestamp() + 1.0
    assert terminate_instance(gone, "d-release", aws.capacity) is None  # no error either


def test_a_quota_or_image_failure_moves_on_and_is_not_called_capacity(aws: AwsEnv) -> None:
    """AWS gives a failed launch's reason only as text. A vCPU quota and a missing image are
    backed off (asking again cannot help) under their own category, and the next offer fills."""
    from provisioner.domain.errors import LaunchSpecError
    from provisioner.domain.failures import ErrorCategory, category_of

    aws.server.set_launch_error("us-east-1", "p5.48xlarge", "vcpu_quota")
    aws.server.set_launch_error("us-east-1", "p5e.48xlarge", "image")
    p5, p5e, p4d = aws_spec("p5.48xlarge"), aws_spec("p5e.48xlarge"), aws_spec("p4d.24xlarge")
    out = scale_up_with_fallback(
        [p5, p5e, p4d], 2, ports=ports(aws), backoff=Backoff(), now_ts=NOW, settings=SETTINGS
    )
    assert [(p.offer.instance_type, p.added) for p in out.placed] == [("p4d.24xlarge", 2)]
    assert [type(f.error) for f in out.failed] == [QuotaError, LaunchSpecError]
    assert [category_of(f.error) for f in out.failed] == [
        ErrorCategory.QUOTA,
        ErrorCategory.LAUNCH_SPEC,
    ]
    assert "does not exist" in str(out.failed[1].error)  # AWS's own words reach the operator
    assert out.backoff.blocked(p5.offer, NOW) and out.backoff.blocked(p5e.offer, NOW)
    # both failed groups were shrunk back to what they hold: nothing fills behind the planner
    assert aws.capacity.group_status(p5).desired == 0
    assert aws.capacity.group_status(p5e).desired == 0
