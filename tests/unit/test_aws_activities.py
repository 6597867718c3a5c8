"""Which scaling activity answers a request, and what a failed one's text says (hand-built
activities shaped like boto3's DescribeScalingActivities answer)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from provisioner.act.aws_activities import classify_failure, request_failure
from provisioner.domain.errors import (
    AuthError,
    CapacityError,
    LaunchError,
    LaunchSpecError,
    QuotaError,
)

T0 = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
CAPACITY = "We currently do not have sufficient p5.48xlarge capacity in the Availability Zone"


def act(status: str, at: datetime, message: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"StatusCode": status, "StartTime": at}
    if message:
        out["StatusMessage"] = message
    return out


def test_only_activities_from_the_request_on_are_its_outcome() -> None:
    old = act("Failed", T0 - timedelta(days=20), CAPACITY)
    assert request_failure([old], "g", since=T0) is None
    assert isinstance(request_failure([old], "g", since=None), CapacityError)  # none known
    new = act("Failed", T0 + timedelta(seconds=30), CAPACITY)
    assert isinstance(request_failure([old, new], "g", since=T0), CapacityError)


def test_the_date_header_has_whole_seconds_so_the_same_second_counts() -> None:
    # AWS stamped the activity 0.4 s before the Date header's rounded-down second
    early = act("Failed", T0 - timedelta(seconds=0.4), CAPACITY)
    assert isinstance(request_failure([early], "g", since=T0), CapacityError)
    assert request_failure([early], "g", since=T0 + timedelta(seconds=2)) is None


def test_in_progress_says_nothing_and_a_newer_success_clears() -> None:
    pending = act("InProgress", T0 + timedelta(seconds=5))
    assert request_failure([pending], "g", since=T0) is None
    failed = act("Failed", T0 + timedelta(seconds=1), CAPACITY)
    ok = act("Successful", T0 + timedelta(seconds=9))
    assert request_failure([failed, ok], "g", since=T0) is None
    # at one instant (a partly filled request) the failure wins
    same = act("Successful", T0 + timedelta(seconds=1))
    assert isinstance(request_failure([same, failed], "g", since=T0), CapacityError)


def test_text_aws_documents_is_typed_and_unknown_text_is_no_capacity() -> None:
    cases = {
        "There is no Spot capacity available that matches your request.": CapacityError,
        "You have requested more vCPU capacity than your current vCPU limit of 64": QuotaError,
        "Max spot instance count exceeded. Launching EC2 instance failed.": QuotaError,
        "The image id '[ami-1]' does not exist. Launching EC2 instance failed.": LaunchSpecError,
        "The security group 'sg-1' does not exist": LaunchSpecError,
        "You are not authorized to perform this operation.": AuthError,
        "Client.InternalError: Client error on launch.": AuthError,
    }
    for text, typed in cases.items():
        assert type(classify_failure(text, "g")) is typed, text
    odd = classify_failure("Something AWS never wrote before.", "g", "aws:us-east-1:p5")
    assert type(odd) is LaunchError and odd.backoff_offer
    assert odd.code == "ScalingActivityFailed" and "never wrote before" in str(odd)
    assert odd.offer == "aws:us-east-1:p5"
