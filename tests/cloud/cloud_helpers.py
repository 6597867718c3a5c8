"""Shared helpers for the cloud tests (a plain module, so test files import it by a unique name
rather than from `conftest`, of which the suite has several)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenacity import stop_after_attempt, wait_none

from provisioner.act.ports import PoolSpec
from provisioner.act.retry import cloud_retrying
from provisioner.domain.offers import CapacityType

CONTROLLER = "burst-ctl"
ATTEMPTS = 4


def fast_retrying() -> Any:
    return cloud_retrying(wait=wait_none(), stop=stop_after_attempt(ATTEMPTS))


def aws_spec(instance_type: str = "p4d.24xlarge", **kw: Any) -> PoolSpec:
    base: dict[str, Any] = {
        "pool": "aws-a100",
        "cloud": "aws",
        "region": "us-east-1",
        "instance_type": instance_type,
        "capacity": CapacityType.SPOT,
        "gpu_model": "A100" if instance_type.startswith("p4") else "H100",
        "gpus": 8,
        "max_size": 4,
        "image": "ami-12c6146b",
        "controller": CONTROLLER,
        "team": "vision",
        "decision_id": "d-0123456789abcdef",
        "user_data": "#cloud-config\n",
    }
    base.update(kw)
    return PoolSpec(**base)


def gcp_spec(region: str = "us-central1", **kw: Any) -> PoolSpec:
    base: dict[str, Any] = {
        "pool": "gcp-a100",
        "cloud": "gcp",
        "region": region,
        "instance_type": "a2-highgpu-1g",
        "capacity": CapacityType.SPOT,
        "gpu_model": "A100",
        "gpus": 1,
        "max_size": 4,
        "image": "projects/deeplearning-platform-release/global/images/family/common-cu124",
        "controller": CONTROLLER,
        "team": "nlp",
        "decision_id": "d-fedcba9876543210",
        "user_data": "#cloud-config\n",
        "project": "burst-proj",
        "zones": (f"{region}-a", f"{region}-b"),
    }
    base.update(kw)
    return PoolSpec(**base)


@dataclass
class AwsEnv:
    server: Any
    clients: Any
    driver: Any
    capacity: Any

    def ec2(self, region: str = "us-east-1") -> Any:
        return self.clients.ec2(region)

    def asg(self, region: str = "us-east-1") -> Any:
        return self.clients.autoscaling(region)


@dataclass
class GcpEnv:
    fake: Any
    clients: Any
    driver: Any
    capacity: Any
