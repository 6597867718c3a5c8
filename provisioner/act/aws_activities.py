"""An EC2 Auto Scaling group's scaling activities: which one answers the current request, and
what kind of failure a failed one reports.

Two facts of the real service shape this (see docs/clouds.md):

* AWS keeps a group's activities for six weeks and answers newest first. A `Failed` activity
  from an earlier request is still there after a new resize, and the new request's own launch
  is written only when Auto Scaling gets to it (its result seconds to minutes later). So only
  activities that started at or after the request count as its outcome.
* A failed launch carries its reason only as text (`StatusMessage`), never as an error code.
  The phrases matched below are the ones AWS documents in "Troubleshoot Amazon EC2 Auto Scaling:
  EC2 instance launch failures" and quotes from the EC2 API's error messages. A message no
  phrase matches is a `LaunchError`: shown as AWS wrote it, backed off like any failed launch,
  but never called a capacity shortage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from provisioner.domain.errors import (
    AuthError,
    CapacityError,
    CloudError,
    LaunchError,
    LaunchSpecError,
    QuotaError,
)

# The HTTP `Date` header the request time is read from has whole seconds.
_DATE_RESOLUTION = timedelta(seconds=1)

# (code given to the failure, its class, lower-case phrases of AWS's documented messages).
# Checked in order: a spot shortage mentions "capacity" and is capacity, not a quota.
_FAILURE_KINDS: tuple[tuple[str, type[CloudError], tuple[str, ...]], ...] = (
    (
        "InsufficientInstanceCapacity",
        CapacityError,
        (
            "we currently do not have sufficient",
            "there is no spot capacity available",
            "insufficientinstancecapacity",
            "insufficient capacity",
        ),
    ),
    (
        "VcpuLimitExceeded",
        QuotaError,
        (
            "vcpu limit",
            "vcpulimitexceeded",
            "instancelimitexceeded",
            "max spot instance count exceeded",
            "instance(s) are already running",
        ),
    ),
    (
        "UnauthorizedOperation",
        AuthError,
        (
            "not authorized",
            "unauthorizedoperation",
            "accessdenied",
            # AWS's text for a KMS key the service-linked role may not use (encrypted volumes)
            "client.internalerror: client error on launch",
        ),
    ),
    (
        "InvalidLaunchSpecification",
        LaunchSpecError,
        (
            "does not exist",
            "is invalid",
            "is not supported",
            "currently not supported",
            "no longer supported",
            "invalidamiid",
            "invalidparameter",
            "is pending, and cannot be run",
            "not subscribed",
        ),
    ),
)
UNCLASSED = "ScalingActivityFailed"


def classify_failure(message: str, group: str, offer: str = "") -> CloudError:
    """The typed error a failed launch activity's `StatusMessage` reports."""
    text = message.lower()
    for code, cls, phrases in _FAILURE_KINDS:
        if any(p in text for p in phrases):
            return cls(f"aws {code}: launch failed in {group}: {message}", code=code, offer=offer)
    return LaunchError(
        f"aws {UNCLASSED}: launch failed in {group}: {message}", code=UNCLASSED, offer=offer
    )


def request_failure(
    activities: Iterable[Mapping[str, Any]],
    group: str,
    *,
    since: datetime | None,
    offer: str = "",
) -> CloudError | None:
    """The failure reported for the request made at `since` (the cloud's own time): the newest
    `Failed` activity that started then or later, unless a `Successful` one is newer. Activities
    still in progress say nothing yet. Without `since` (no request known to this process),
    every activity back to the last successful one counts."""
    floor = since.astimezone(UTC) - _DATE_RESOLUTION if since is not None else None
    # newest first; at one instant a failure before a success (a partly filled request)
    newest_first = sorted(
        activities, key=lambda a: (_started(a), a.get("StatusCode") == "Failed"), reverse=True
    )
    for act in newest_first:
        if floor is not None and _started(act) < floor:
            break  # older than the request: another request's outcome
        status = act.get("StatusCode")
        if status == "Successful":
            return None
        if status == "Failed":
            return classify_failure(str(act.get("StatusMessage", "")), group, offer)
    return None


def _started(act: Mapping[str, Any]) -> datetime:
    ts = act.get("StartTime")
    if isinstance(ts, datetime):
        return ts if ts.tzinfo else ts.replace(tzinfo=UTC)
    return datetime.min.replace(tzinfo=UTC)
