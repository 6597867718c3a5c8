"""The cloud implementations the contract suite runs over, each behind one small `CloudEnv`.

* `fake`: the in-memory cloud of tests/contract/fakes.py.
* `aws`: the real boto3 adapter over HTTP against moto's server on 127.0.0.1, behind the
  project's fault layer (provisioner.testing.moto_faults); one server per session, reset per test.
* `gcp`: the real google-cloud-compute adapter against the project's Compute fake on 127.0.0.1
  (provisioner.testing.fake_gce), one per test.

A `CloudEnv` also reads the cloud's own records (boto3 describe calls, the GCE fake's dicts, the
in-memory cloud's dicts), which are what the suites compare the port's answers with, and injects
the faults each layer can raise. Nothing sleeps; every retry policy waits zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from tenacity import stop_after_attempt, wait_none

from provisioner.act.ports import CloudCapacity, PoolDriver, PoolSpec
from provisioner.act.retry import cloud_retrying
from provisioner.domain.errors import (
    AuthError,
    CloudError,
    QuotaError,
    ThrottlingError,
    TransientError,
)
from provisioner.domain.offers import CapacityType
from provisioner.testing.moto_faults import use_test_credentials

CONTROLLER = "contract-ctl"
OTHER_CONTROLLER = "contract-other"
ATTEMPTS = 3
# Instance types no other suite limits, so moto servers of other suites in the same process (moto's
# backends are process-wide) cannot reach into these tests.
AWS_TYPE = "p5e.48xlarge"
GCP_TYPE = "a2-highgpu-1g"

# error kind -> (the taxonomy type, AWS code and HTTP status, GCE HTTP status and reason)
FAULTS: dict[str, tuple[type[CloudError], tuple[str, int], tuple[int, str]]] = {
    "throttling": (ThrottlingError, ("Throttling", 400), (429, "rateLimitExceeded")),
    "quota": (QuotaError, ("LimitExceeded", 400), (403, "quotaExceeded")),
    "auth": (AuthError, ("AccessDenied", 403), (403, "forbidden")),
    "transient": (TransientError, ("InternalFailure", 500), (503, "backendError")),
}


def fast_retrying() -> Any:
    return cloud_retrying(wait=wait_none(), stop=stop_after_attempt(ATTEMPTS))


@dataclass
class CloudEnv:
    name: str
    driver: PoolDriver
    capacity: CloudCapacity
    make_spec: Callable[..., PoolSpec]
    live: Callable[[str], dict[str, dict[str, str]]]  # the cloud's own: live id -> tags
    desired: Callable[[PoolSpec], int | None]  # the cloud's own group size (None: no group)
    inject: Callable[[PoolSpec, str, int], None]  # (spec, error kind, times) on resize
    limit: Callable[[PoolSpec, int], None]  # the offer's region can launch only n more
    # The cloud's own record of an instance: (the node named on it, its private address).
    identity: Callable[[str], tuple[str, str]]


def _spec(cloud: str, **kw: Any) -> PoolSpec:
    base: dict[str, Any] = {
        "pool": f"{cloud}-contract",
        "cloud": cloud,
        "capacity": CapacityType.SPOT,
        "gpus": 8,
        "max_size": 4,
        "controller": CONTROLLER,
        "team": "vision",
        "decision_id": "d-0123456789abcdef",
        "user_data": "#cloud-config\n",
    }
    if cloud == "aws":
        base |= {"region": "us-east-1", "instance_type": AWS_TYPE, "gpu_model": "H200"}
        base |= {"image": "ami-12c6146b"}
    else:
        base |= {"region": "us-central1", "instance_type": GCP_TYPE, "gpu_model": "A100"}
        base |= {"image": "projects/deeplearning-platform-release/global/images/family/x"}
        base |= {"project": "burst-proj", "zones": ("us-central1-a", "us-central1-b")}
    base.update(kw)
    return PoolSpec(**base)


# ----------------------------------------------------------------------------- in-memory
def fake_env() -> CloudEnv:
    from contract_fakes import InMemoryCloud

    world = InMemoryCloud(fast_retrying())

    def live(controller: str) -> dict[str, dict[str, str]]:
        return {
            i.instance_id: dict(i.tags)
            for i in world.instances.values()
            if i.tags.get("controller") == controller
        }

    def desired(spec: PoolSpec) -> int | None:
        group = world.groups.get((spec.region, spec.group_name))
        return None if group is None else group.desired

    def inject(spec: PoolSpec, kind: str, times: int) -> None:
        cls = FAULTS[kind][0]
        world.fail("resize", cls(f"fake {kind}", code=kind, offer=str(spec.offer)), times)

    return CloudEnv(
        "fake",
        world.driver,
        world.capacity,
        lambda **kw: _spec("aws", **kw),  # the fake takes any spec; an AWS-shaped one will do
        live,
        desired,
        inject,
        lambda spec, n: world.set_capacity(spec.region, spec.instance_type, n),
        lambda iid: (world.instances[iid].node, world.instances[iid].private_ip),
    )


# ----------------------------------------------------------------------------- AWS / moto
def aws_env(server: Any, monkeypatch: pytest.MonkeyPatch) -> CloudEnv:
    from provisioner.act.aws import AwsCapacity, AwsClients, AwsPoolDriver

    server.reset()
    use_test_credentials(monkeypatch)
    clients = AwsClients(server.endpoint)
    ec2, asg = clients.ec2("us-east-1"), clients.autoscaling("us-east-1")

    def live(controller: str) -> dict[str, dict[str, str]]:
        flt = [
            {"Name": "tag:controller", "Values": [controller]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
        res = ec2.describe_instances(Filters=flt)["Reservations"]
        return {
            i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}
            for r in res
            for i in r["Instances"]
        }

    def desired(spec: PoolSpec) -> int | None:
        out = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[spec.group_name])
        groups = out["AutoScalingGroups"]
        return int(groups[0]["DesiredCapacity"]) if groups else None

    def inject(spec: PoolSpec, kind: str, times: int) -> None:
        code, status = FAULTS[kind][1]
        server.add_fault(
            "SetDesiredCapacity", code, service="autoscaling", status=status, times=times
        )

    def identity(iid: str) -> tuple[str, str]:
        (res,) = ec2.describe_instances(InstanceIds=[iid])["Reservations"]
        (inst,) = res["Instances"]
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        return tags.get("slurm-node", ""), str(inst.get("PrivateIpAddress", ""))

    retrying = fast_retrying()
    return CloudEnv(
        "aws",
        AwsPoolDriver(clients, retrying),
        AwsCapacity(["us-east-1"], clients, retrying),
        lambda **kw: _spec("aws", **kw),
        live,
        desired,
        inject,
        lambda spec, n: server.set_capacity(spec.region, spec.instance_type, n),
        identity,
    )


# ----------------------------------------------------------------------------- GCP / fake
def gcp_env(fake: Any) -> CloudEnv:
    from google.auth.credentials import AnonymousCredentials

    from provisioner.act.gcp import GcpCapacity, GcpClients, GcpPoolDriver

    clients = GcpClients("burst-proj", fake.endpoint, credentials=AnonymousCredentials())

    def live(controller: str) -> dict[str, dict[str, str]]:
        return {
            name: dict(inst.get("labels", {}))
            for (_, name), inst in fake.instances.items()
            if inst.get("labels", {}).get("controller") == controller
            and inst.get("status") in ("PROVISIONING", "STAGING", "RUNNING")
        }

    def desired(spec: PoolSpec) -> int | None:
        mig = fake.migs.get((spec.region, spec.group_name))
        return None if mig is None else int(mig["targetSize"])

    def inject(spec: PoolSpec, kind: str, times: int) -> None:
        status, reason = FAULTS[kind][2]
        path = f"/instanceGroupManagers/{spec.group_name}/resize"
        fake.add_fault(
            method="POST", path_contains=path, http_status=status, reason=reason, times=times
        )

    def identity(name: str) -> tuple[str, str]:
        (inst,) = [v for (_, n), v in fake.instances.items() if n == name]
        items = {i["key"]: i["value"] for i in inst.get("metadata", {}).get("items", [])}
        return items.get("slurm-node", ""), str(inst["networkInterfaces"][0]["networkIP"])

    retrying = fast_retrying()
    return CloudEnv(
        "gcp",
        GcpPoolDriver(clients, retrying),
        GcpCapacity(clients, retrying),
        lambda **kw: _spec("gcp", **kw),
        live,
        desired,
        inject,
        lambda spec, n: fake.set_capacity(spec.region, spec.instance_type, n),
        identity,
    )
