"""Launch outcomes as a real EC2 Auto Scaling group reports them, held against the AWS port over
moto's server with the stand-in's field-like switches (provisioner/testing/asg_activities.py,
docs/clouds.md "Launch outcomes"):

* activities are kept (six weeks on AWS), so an earlier request's `Failed` launch is still listed
  after a new resize, before the new one's own outcome is known;
* a launch's outcome is `InProgress` for a while (`set_result_delay`), on the stand-in's clock;
* a failed launch's reason is AWS's text only; the port types it by what the text says.

And the GCP port over the GCE fake: a managed instance that was not created is typed by the
code of its `lastAttempt.errors` (the fake's `launch_errors`).

The stand-in's clock is injected; nothing sleeps. Expected types come from the kind of failure
switched on in the stand-in, never from the port.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cloud_envs import AWS_TYPE, CloudEnv, aws_env

from provisioner.act.ports import request_token
from provisioner.domain.errors import (
    AuthError,
    CapacityError,
    CloudError,
    LaunchSpecError,
    QuotaError,
)

REGION = "us-east-1"


class StandInClock:
    """The cloud's own clock, moved by hand."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def aws(moto_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CloudEnv, Any]]:
    env = aws_env(moto_server, monkeypatch)
    try:
        yield env, moto_server
    finally:
        moto_server.use_clock(None)
        moto_server.reset()


@pytest.mark.aws
def test_an_earlier_requests_failure_is_not_read_as_the_new_ones(
    aws: tuple[CloudEnv, Any],
) -> None:
    """AWS keeps activities for six weeks. Three weeks after a stockout the group is asked again;
    right after that resize the new launch is still in progress, and the old failure says
    nothing about it."""
    cloud, server = aws
    clock = StandInClock(datetime(2026, 11, 10, 9, 0, tzinfo=UTC))
    server.use_clock(clock)
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    server.set_capacity(REGION, AWS_TYPE, 0)
    cloud.capacity.resize(spec, 1, request_token("first"))
    first = cloud.capacity.group_status(spec)
    assert isinstance(first.failure, CapacityError)  # the first request's own outcome
    cloud.capacity.resize(spec, 0, request_token("shrunk back"))

    clock.advance(21 * 24 * 3600)
    server.set_result_delay(40)  # this time the outcome comes 40 s late
    cloud.capacity.resize(spec, 1, request_token("three weeks later"))
    now = cloud.capacity.group_status(spec)
    assert (now.desired, now.launched) == (1, 0)
    assert now.failure is None, "a three-week-old failure taken as this request's"

    clock.advance(40)  # the new request's own outcome arrives
    late = cloud.capacity.group_status(spec)
    assert isinstance(late.failure, CapacityError)


@pytest.mark.aws
def test_a_controller_that_restarted_reads_no_earlier_failure_as_the_new_requests(
    aws: tuple[CloudEnv, Any],
) -> None:
    """The adapter remembers its own resizes in memory; a controller that restarts between a
    resize and its outcome passes when it asked (the intent's time, on the cloud's clock)."""
    from dataclasses import replace

    from provisioner.act.aws import AwsCapacity

    cloud, server = aws
    clock = StandInClock(datetime(2026, 11, 10, 9, 0, tzinfo=UTC))
    server.use_clock(clock)
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    server.set_capacity(REGION, AWS_TYPE, 0)
    cloud.capacity.resize(spec, 1, request_token("first"))
    cloud.capacity.resize(spec, 0, request_token("shrunk back"))
    clock.advance(3600)
    asked = clock.at.timestamp()
    server.set_result_delay(40)
    cloud.capacity.resize(spec, 1, request_token("an hour later"))

    restarted = AwsCapacity([REGION], cloud.capacity.clients)  # remembers no resize
    blind = restarted.group_status(spec)
    assert isinstance(blind.failure, CapacityError)  # without the time: the old one is read
    told = restarted.group_status(replace(spec, requested_ts=asked))
    assert told.failure is None, "an hour-old failure taken as this request's"
    clock.advance(40)
    late = restarted.group_status(replace(spec, requested_ts=asked))
    assert isinstance(late.failure, CapacityError)  # this request's own outcome


@pytest.mark.aws
def test_a_launch_outcome_that_comes_late_is_none_until_it_comes(
    aws: tuple[CloudEnv, Any],
) -> None:
    cloud, server = aws
    clock = StandInClock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    server.use_clock(clock)
    server.set_result_delay(30)
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    server.set_capacity(REGION, AWS_TYPE, 0)
    cloud.capacity.resize(spec, 2, request_token("late"))
    assert cloud.capacity.group_status(spec).failure is None  # in progress
    clock.advance(29)
    assert cloud.capacity.group_status(spec).failure is None
    clock.advance(1)
    status = cloud.capacity.group_status(spec)
    assert isinstance(status.failure, CapacityError) and status.shortfall == 2


# kind switched on in the stand-in -> the type AWS's text says it is, and the code shown
KINDS: list[Any] = [
    ("capacity", CapacityError, "InsufficientInstanceCapacity"),
    ("spot_capacity", CapacityError, "InsufficientInstanceCapacity"),
    ("vcpu_quota", QuotaError, "VcpuLimitExceeded"),
    ("image", LaunchSpecError, "InvalidLaunchSpecification"),
    ("parameter", LaunchSpecError, "InvalidLaunchSpecification"),
    ("permission", AuthError, "UnauthorizedOperation"),
    ("kms", AuthError, "UnauthorizedOperation"),
]


@pytest.mark.aws
@pytest.mark.parametrize(("kind", "typed", "code"), KINDS)
def test_a_failed_launch_is_typed_by_what_aws_says(
    aws: tuple[CloudEnv, Any], kind: str, typed: type[CloudError], code: str
) -> None:
    cloud, server = aws
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    server.set_launch_error(REGION, AWS_TYPE, kind)
    cloud.capacity.resize(spec, 1, request_token(kind))
    failure = cloud.capacity.group_status(spec).failure
    assert type(failure) is typed, f"{kind}: {failure!r}"
    assert failure.code == code
    assert failure.backoff_offer == (typed is not AuthError)  # auth: an operator must act


@pytest.mark.aws
def test_the_stand_in_keeps_each_launch_as_aws_answers_it(aws: tuple[CloudEnv, Any]) -> None:
    """The switches themselves, read with boto3 as any AWS client would: one activity per
    launch, newest first, `InProgress` without a reason until the outcome is due."""
    cloud, server = aws
    clock = StandInClock(datetime(2026, 12, 2, 8, 0, tzinfo=UTC))
    server.use_clock(clock)
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    server.set_capacity(REGION, AWS_TYPE, 1)
    cloud.capacity.resize(spec, 1, request_token("one fits"))
    clock.advance(60)
    server.set_result_delay(20)
    cloud.capacity.resize(spec, 3, request_token("two do not"))
    asg = cloud_asg(server)

    def activities() -> list[dict[str, Any]]:
        out = asg.describe_scaling_activities(AutoScalingGroupName=spec.group_name)
        return list(out["Activities"])

    acts = activities()
    assert [a["StatusCode"] for a in acts] == ["InProgress", "InProgress", "Successful"]
    assert [a["StartTime"] for a in acts] == sorted((a["StartTime"] for a in acts), reverse=True)
    assert all("StatusMessage" not in a for a in acts)
    clock.advance(20)
    acts = activities()
    assert [a["StatusCode"] for a in acts] == ["Failed", "Failed", "Successful"]
    assert "do not have sufficient" in acts[0]["StatusMessage"]
    assert acts[0]["EndTime"] - acts[0]["StartTime"] == timedelta(seconds=20)


def cloud_asg(server: Any) -> Any:
    import boto3

    return boto3.client("autoscaling", endpoint_url=server.endpoint, region_name=REGION)


# ----------------------------------------------------------------------------- GCP / GCE fake
# kind switched on in the GCE fake -> the type its lastAttempt code says it is
GCE_KINDS: list[Any] = [
    ("capacity", CapacityError),
    ("quota", QuotaError),
    ("image", LaunchSpecError),
    ("parameter", LaunchSpecError),
]


@pytest.mark.gcp
@pytest.mark.parametrize(("kind", "typed"), GCE_KINDS)
def test_a_managed_instance_not_created_is_typed_by_its_last_attempt(
    gcp_and_fake: tuple[CloudEnv, Any], kind: str, typed: type[CloudError]
) -> None:
    from cloud_envs import GCP_TYPE

    cloud, fake = gcp_and_fake
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    fake.launch_errors[GCP_TYPE] = kind
    cloud.capacity.resize(spec, 1, request_token(kind))
    status = cloud.capacity.group_status(spec)
    assert status.shortfall == 1
    assert type(status.failure) is typed, f"{kind}: {status.failure!r}"
    assert status.failure.backoff_offer  # never asked again every pass
