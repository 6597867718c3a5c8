"""The cloud faults of the chaos soaks, injected at the stand-ins: moto's fault layer (AWS) and
the Compute Engine fake (GCP). See provisioner/demo/chaos.py for the soak itself."""

from __future__ import annotations

import random
from typing import Any

from provisioner.domain.errors import InvalidArgument

REGION = "us-east-1"
ITYPE = "p4d.24xlarge"
GCP_REGION = "us-central1"
GCP_TYPE = "a2-highgpu-8g"
# The clouds' field behaviour (docs/clouds.md)
FIELD_FAULTS = ("late_failure", "rebalance", "unreachable_zone", "launch_error")


CLOUD_FAULTS = ("capacity", "partial_fill", "throttle", "lost_response")


def inject_cloud_fault(server: Any, kind: str, rng: random.Random) -> None:
    """One of CLOUD_FAULTS at moto's fault layer: no capacity left, room for one instance,
    throttling, or a resize/terminate moto carries out whose answer is lost."""
    if kind == "capacity":
        server.set_capacity(REGION, ITYPE, 0)
    elif kind == "partial_fill":
        server.set_capacity(REGION, ITYPE, 1)
    elif kind == "throttle":
        action = rng.choice(["SetDesiredCapacity", "DescribeAutoScalingGroups"])
        server.add_fault(action, "Throttling", service="autoscaling", status=400, times=2)
    elif kind == "lost_response":
        action = rng.choice(["SetDesiredCapacity", "TerminateInstanceInAutoScalingGroup"])
        server.add_fault(action, "InternalFailure", service="autoscaling", status=500,
                         times=1, apply=True)  # fmt: skip
    else:
        raise InvalidArgument(f"not a cloud fault: {kind!r}")


def inject_gce_fault(gce: Any, kind: str, rng: random.Random) -> None:
    """One of CLOUD_FAULTS at the Compute Engine fake: no capacity left in the region, room
    for one VM, rate limiting of the group calls, or a resize/deleteInstances carried out whose
    answer is lost."""
    groups = "/instanceGroupManagers/"
    if kind == "capacity":
        gce.set_capacity(GCP_REGION, GCP_TYPE, 0)
    elif kind == "partial_fill":
        gce.set_capacity(GCP_REGION, GCP_TYPE, 1)
    elif kind == "throttle":
        gce.add_fault(path_contains=groups, http_status=429, reason="rateLimitExceeded", times=2)
    elif kind == "lost_response":
        verb = rng.choice(["/resize", "/deleteInstances"])
        gce.add_fault(method="POST", path_contains=verb, http_status=503, reason="backendError",
                      apply=True, times=1)  # fmt: skip
    else:
        raise InvalidArgument(f"not a cloud fault: {kind!r}")


def inject_field_fault(server: Any, gce: Any, kind: str, rng: random.Random) -> str:
    """One of FIELD_FAULTS, on the cloud whose stand-in models it; returns that cloud.

    - late_failure: AWS has no capacity and reports it 10 to 60 s after each resize;
    - rebalance: each group is asked to even out its zones, replace a member as unhealthy and
      swap one on a rebalance recommendation (the group must do none of it);
    - unreachable_zone: a zone of the GCP region does not answer listings;
    - launch_error: launches fail for a quota, a missing image or a permission (AWS) or a
      quota, image or invalid field (GCP), never for capacity.
    """
    from provisioner.testing import asg_autonomy

    if kind == "late_failure":
        server.set_result_delay(rng.uniform(10.0, 60.0))
        server.set_capacity(REGION, ITYPE, 0)
        return "aws"
    if kind == "rebalance":
        asg = _autoscaling(server.endpoint)
        for group in asg.describe_auto_scaling_groups()["AutoScalingGroups"]:
            name = group["AutoScalingGroupName"]
            members = sorted(i["InstanceId"] for i in group.get("Instances", []))
            asg_autonomy.rebalance(REGION, name)
            if members:
                asg_autonomy.replace_unhealthy(REGION, name, rng.choice(members))
                asg_autonomy.capacity_rebalance(REGION, name, rng.choice(members))
        return "aws"
    if kind == "unreachable_zone":
        gce.unreachable_zones.add(f"{GCP_REGION}-{rng.choice('abc')}")
        return "gcp"
    if kind == "launch_error":
        if rng.random() < 0.5:
            server.set_launch_error(
                REGION, ITYPE, rng.choice(["vcpu_quota", "image", "permission"])
            )
            return "aws"
        gce.launch_errors[GCP_TYPE] = rng.choice(["quota", "image", "parameter"])
        return "gcp"
    raise InvalidArgument(f"not a field fault: {kind!r}")


def _autoscaling(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "autoscaling",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
