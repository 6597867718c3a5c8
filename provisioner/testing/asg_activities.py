"""The moto stand-in's scaling-activity history: what EC2 Auto Scaling writes for each instance
launch of a group, kept and answered the way AWS does (moto itself answers
`DescribeScalingActivities` empty).

Faithful to (see docs/clouds.md, "Launch outcomes"):

* **One activity per launch, kept.** Auto Scaling writes an activity for each instance it tries
  to launch, stamped when the launch started on its own clock, and keeps it for six weeks
  ("Verify a scaling activity for an Auto Scaling group", EC2 Auto Scaling User Guide). Answers
  are newest first. Kept here until the stand-in is reset.
* **The outcome arrives late.** A launch is `InProgress` until EC2 answers it; a failure such as
  InsufficientInstanceCapacity is reported tens of seconds after the resize. `result_delay_s`
  says how long after its start an activity keeps `InProgress`, on the stand-in's clock.
* **The reason is text only.** A failed launch carries AWS's message in `StatusMessage`, no error
  code. `LAUNCH_ERRORS` holds the messages AWS documents in "Troubleshoot Amazon EC2 Auto
  Scaling: EC2 instance launch failures" for each kind a test can switch on.

Simplified: a real group retries a failed launch on its own, with growing pauses, and may fill
the shortfall much later; this one does not retry. A `Successful` activity's message and cause
are shorter than AWS's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from xml.sax.saxutils import escape

# kind -> AWS's documented StatusMessage ({type}, {zone}, {image} filled in)
LAUNCH_ERRORS = {
    "capacity": (
        "We currently do not have sufficient {type} capacity in the Availability Zone you "
        "requested ({zone}). Our system will be working on provisioning additional capacity. "
        "You can currently get {type} capacity by not specifying an Availability Zone in your "
        "request or choosing other Availability Zones. Launching EC2 instance failed."
    ),
    "spot_capacity": (
        "There is no Spot capacity available that matches your request. "
        "Launching EC2 instance failed."
    ),
    "vcpu_quota": (
        "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the "
        "instance bucket that the specified instance type belongs to. Please visit "
        "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit. "
        "Launching EC2 instance failed."
    ),
    "image": "The image id '[{image}]' does not exist. Launching EC2 instance failed.",
    "parameter": (
        "Value (burst-node-profile) for parameter iamInstanceProfile.name is invalid. Invalid IAM "
        "Instance Profile name. Launching EC2 instance failed."
    ),
    "permission": (
        "You are not authorized to perform this operation. Launching EC2 instance failed."
    ),
    "kms": "Client.InternalError: Client error on launch.",
}

_MEMBER = (
    "<member><ActivityId>{aid}</ActivityId><AutoScalingGroupName>{group}</AutoScalingGroupName>"
    "<Description>{description}</Description><Cause>{cause}</Cause>"
    "<StartTime>{start}</StartTime>{end}<StatusCode>{status}</StatusCode>{message}"
    "<Progress>{progress}</Progress></member>"
)
_RESPONSE = (
    '<DescribeScalingActivitiesResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">'
    "<DescribeScalingActivitiesResult><Activities>{members}</Activities>"
    "</DescribeScalingActivitiesResult><ResponseMetadata><RequestId>{rid}</RequestId>"
    "</ResponseMetadata></DescribeScalingActivitiesResponse>"
)


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass(frozen=True)
class Activity:
    group: str
    start: datetime
    succeeded: bool
    message: str  # the failure's StatusMessage ("" for a success)
    instance_id: str = ""
    activity_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def member(self, now: datetime, result_delay_s: float) -> str:
        done = now >= self.start + timedelta(seconds=result_delay_s)
        status = ("Successful" if self.succeeded else "Failed") if done else "InProgress"
        what = f": {self.instance_id}" if self.instance_id else "."
        description = f"Launching a new EC2 instance{what}"
        if done and not self.succeeded:
            description += f"  Status Reason: {self.message}"
        cause = (
            f"At {_iso(self.start)} an instance was started in response to a difference between "
            "desired and actual capacity."
        )
        end = f"<EndTime>{_iso(self.start + timedelta(seconds=result_delay_s))}</EndTime>"
        message = f"<StatusMessage>{escape(self.message)}</StatusMessage>"
        return _MEMBER.format(
            aid=self.activity_id,
            group=escape(self.group),
            description=escape(description),
            cause=escape(cause),
            start=_iso(self.start),
            end=end if done else "",
            status=status,
            message=message if done and not self.succeeded else "",
            progress=100 if done else 30,
        )


@dataclass
class ActivityLog:
    """Every launch activity of every group, oldest first (guarded by the fault layer's lock)."""

    result_delay_s: float = 0.0
    entries: list[Activity] = field(default_factory=list)

    def launched(self, group: str, at: datetime, instance_id: str) -> None:
        self.entries.append(Activity(group, at, True, "", instance_id))

    def failed(self, group: str, at: datetime, message: str) -> None:
        self.entries.append(Activity(group, at, False, message))

    def of(self, group: str) -> list[Activity]:
        return [a for a in self.entries if a.group == group]

    def clear(self) -> None:
        self.entries.clear()
        self.result_delay_s = 0.0

    def answer(self, group: str, now: Callable[[], datetime]) -> str:
        """The DescribeScalingActivities body for `group`: newest first, outcomes as of now."""
        at = now()
        newest_first = sorted(self.of(group), key=lambda a: a.start, reverse=True)
        members = "".join(a.member(at, self.result_delay_s) for a in newest_first)
        return _RESPONSE.format(members=members, rid=uuid.uuid4())
