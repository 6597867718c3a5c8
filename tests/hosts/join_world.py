"""What the join tests on test hosts share: moto's subnet on the tests' /24, the real controller
pointed at a test-host cluster (and at moto or the GCE fake), and a driver that runs its passes
while the cloud stand-in's hypervisor boots and removes hosts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import boto3
import pytest

from provisioner.bootstrap import Controller, build_clouds, build_controller, load_settings
from provisioner.clock import ManualClock
from provisioner.config import load_policy
from provisioner.config.models import PoolPolicy
from provisioner.domain.instances import InstanceState
from provisioner.domain.jobs import JobState
from provisioner.domain.plan import ReasonCode
from provisioner.store import Store
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms
from provisioner.testing.moto_faults import TEST_CREDENTIALS
from tests.hosts.conftest import HostCluster

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies" / "demo" / "slurm"
REGION = "us-east-1"
S = InstanceState
T = TypeVar("T")

# What a job prints: the instance id its host's metadata service gives (IMDSv2), and the node
# Slurm started it as.
WHOAMI = """#!/bin/sh
python3 - <<'EOF'
import os, urllib.request as u
md = "http://169.254.169.254/latest/"
tok = u.urlopen(u.Request(md + "api/token", method="PUT",
                          headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})).read()
iid = u.urlopen(u.Request(md + "meta-data/instance-id",
                          headers={"X-aws-ec2-metadata-token": tok.decode()})).read().decode()
print(iid, os.environ["SLURMD_NODENAME"])
EOF
sleep 2
"""


# How long a VM may take from launch to its node registering, on the controller's side (its
# join timeout) and the VM's (how long it waits for its node name). A test host joins ~4 s
# after launch here, but the demo policy's 60 s was once not enough on a loaded CI machine:
# tests that are not about the timeout allow what a cloud allows (slurm-gcp's ResumeTimeout
# default is 300 s; the test clusters' is above this, so the controller's reason comes first).
JOIN_TIMEOUT_S = 240.0

# moto's stand-in keys: any key passes while its IAM enforcement is off
MOTO_KEYS = (TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"], TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])


def ec2_client(endpoint: str, keys: tuple[str, str] = MOTO_KEYS) -> Any:
    return aws_client("ec2", endpoint, keys)


def aws_client(service: str, endpoint: str, keys: tuple[str, str] = MOTO_KEYS) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=keys[0],
        aws_secret_access_key=keys[1],
    )


def make_controller(
    cluster: HostCluster,
    endpoint: str | None,
    subnet: str,
    tmp: Path,
    *,
    pools: list[PoolPolicy] | None = None,
    images: dict[str, str] | None = None,
    gcp: tuple[str, str, Any] | None = None,
    node: dict[str, Any] | None = None,
    aws_keys: tuple[str, str] = MOTO_KEYS,
    munge_socket: str = "",
    join_timeout_s: float = JOIN_TIMEOUT_S,
    guardrails: dict[str, Any] | None = None,
) -> Controller:
    """The demo Slurm policy's controller, its VMs joining `cluster` by address. AWS: moto at
    `endpoint`, instances in `subnet`. `pools`/`images` replace the policy's; `gcp`: the GCE
    fake's endpoint, the project and the credentials to reach it with."""
    base = load_policy(POLICIES)
    node = base.node.model_copy(
        update={
            "controller_host": hosts.HOST_ADDRESS,
            "controller_port": cluster.port,
            "node_address": "instance",
            "join_deadline_s": int(join_timeout_s),
            **({"images": images} if images else {}),
            **(node or {}),
        }
    )
    chosen = pools if pools is not None else base.pools
    chosen = [p.model_copy(update={"subnets": [subnet]}) if subnet else p for p in chosen]
    rails = base.guardrails.model_copy(
        update={"join_timeout_s": join_timeout_s, **(guardrails or {})}
    )
    policy = base.model_copy(update={"node": node, "pools": chosen, "guardrails": rails})
    gce_endpoint, project, credentials = gcp if gcp else (None, "", None)
    settings = load_settings(
        store_url=f"sqlite:///{tmp / 'controller.sqlite'}",
        policies=POLICIES,
        slurm_mode="cli",
        slurm_conf=cluster.env["SLURM_CONF"],
        slurm_bin_dir=cluster.env.get("SLURM_BIN_DIR") or None,
        state_dir=cluster.env["PROVISIONER_STATE_DIR"],
        aws_endpoint_url=endpoint,
        gce_endpoint=gce_endpoint,
        gcp_project=project,
        pool_driver="sdk",
        tick_s=0.5,
        munge_socket=munge_socket,
    )
    session = boto3.session.Session(
        aws_access_key_id=aws_keys[0], aws_secret_access_key=aws_keys[1], region_name=REGION
    )
    clouds = build_clouds(settings, policy, aws_session=session, gcp_credentials=credentials)
    return build_controller(
        settings,
        clock=ManualClock(datetime.now(UTC)),
        store=Store(settings.store_url),
        policy=policy,
        clouds=clouds,
    )


class Driver:
    """Passes of the controller (its clock set to the wall clock first), each after the cloud
    stand-in's hypervisor booted or removed hosts, until a condition holds."""

    def __init__(self, c: Controller, vms: CloudVms) -> None:
        self.c = c
        self.vms = vms
        self.errors: list[str] = []
        self.pass_clocks: list[float] = []  # the controller's clock at each pass, in order

    def first_pass_after(self, ts: float) -> float:
        """The clock of the first pass later than `ts`: when a deadline at `ts` could first be
        seen, however slowly passes ran on a loaded machine."""
        return next(t for t in self.pass_clocks if t > ts)

    def until(self, what: str, cond: Callable[[], T | None], timeout: float) -> T:
        deadline = time.monotonic() + timeout
        while True:
            self.vms.sync()
            assert isinstance(self.c.clock, ManualClock)
            now = datetime.now(UTC)
            self.c.clock.set(now)
            self.pass_clocks.append(now.timestamp())
            report = self.c.reconciler.run_pass()
            self.errors.extend(report.errors)
            got = cond()
            if got:
                return got
            if time.monotonic() > deadline:
                snap = self.c.reconciler.last_snapshot
                nodes = [(n.name, str(n.state), n.address) for n in snap.nodes] if snap else []
                jobs = [(j.job_id, str(j.state), j.nodes) for j in snap.jobs] if snap else []
                insts = [
                    (si.instance.instance_id, str(si.instance.state), si.instance.node_name)
                    for si in self.c.store.instances()
                ]
                consoles = {i: h.tail(8) for i, h in self.vms.running.items()}
                # why each instance went: the decisions that terminated or failed anything
                why = [
                    (d.reason, d.decision.node, d.decision.instance, dict(d.decision.detail))
                    for d in self.c.store.decisions(limit=12)
                    if d.decision.node or d.decision.instance
                ]
                pytest.fail(
                    f"timed out waiting for {what}: nodes={nodes} jobs={jobs} instances={insts} "
                    f"decisions={why} errors={self.errors[-5:]} consoles={consoles} "
                    f"boots={self.vms.boot_story()}"
                )
            time.sleep(0.5)


def job_state(c: Controller, job_id: str) -> JobState | None:
    """The job's state in the controller's last snapshot (None: not there)."""
    snap = c.reconciler.last_snapshot
    j = next((j for j in snap.jobs if j.job_id == job_id), None) if snap else None
    return j.state if j is not None else None


def join_failure_decisions(c: Controller, instance_id: str) -> list[Any]:
    """The controller's join_timeout decisions about one instance, newest first."""
    return [
        d
        for d in c.store.decisions(limit=50)
        if d.reason == ReasonCode.JOIN_TIMEOUT and d.decision.instance == instance_id
    ]


def all_ended(c: Controller) -> bool:
    """The store holds instances, and every one of them has ended."""
    recs = [si.instance for si in c.store.instances()]
    return bool(recs) and all(r.state.terminal for r in recs)


def subnet_on_test_net(ec2: Any) -> str:
    """A VPC and subnet on the tests' /24: moto gives its instances addresses there."""
    vpc = ec2.create_vpc(CidrBlock=f"{hosts.SUBNET}.0/24")["Vpc"]["VpcId"]
    sub = ec2.create_subnet(
        VpcId=vpc, CidrBlock=f"{hosts.SUBNET}.0/24", AvailabilityZone=f"{REGION}a"
    )
    return str(sub["Subnet"]["SubnetId"])


class WhoamiJobs:
    """Two 8-GPU jobs running `script` (it prints what its host says it is), and Slurm's NodeAddr
    for each job's node, read while the job runs: where slurmctld sends that job's work."""

    def __init__(self, c: Controller, cluster: HostCluster, script_text: str) -> None:
        self.c = c
        self.cluster = cluster
        script = cluster.dir / "jobs" / "whoami.sh"
        script.parent.mkdir(exist_ok=True)
        script.write_text(script_text)
        self.ids = [
            cluster.sh(
                "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
                "--chdir=/tmp", "-o", "/tmp/job-%j.out", str(script),
            ).strip().split(";")[0]
            for _ in "12"
        ]  # fmt: skip
        self.addr_of: dict[str, str] = {}

    def done(self) -> dict[str, tuple[str, ...]] | None:
        """job id -> its nodes once both completed (None before), noting NodeAddr meanwhile."""
        snap = self.c.reconciler.last_snapshot
        by_id = {j.job_id: j for j in snap.jobs} if snap else {}
        for j in by_id.values():
            if j.job_id in self.ids and j.state is JobState.RUNNING:
                for n in j.nodes:
                    self.addr_of[n] = self.cluster.node_addr(n)
        if all(j in by_id and by_id[j].state is JobState.COMPLETED for j in self.ids):
            return {j: by_id[j].nodes for j in self.ids}
        return None


ACCOUNT = "123456789012"  # moto's


def node_profile(
    endpoint: str,
    keys: tuple[str, str],
    name: str,
    grant: str | dict[str, Any],
    trusts: tuple[str, ...] = (),
) -> str:
    """An instance profile whose role EC2 may assume (the metadata stand-in, as the admin,
    assumes it for the VM) and `trusts` too, with `grant`: one action allowed on "*", or a
    whole policy document. moto evaluates EC2 and SSM actions against resource "*" only, so a
    grant names "*"; the field policy names the parameter."""
    iam = aws_client("iam", endpoint, keys)
    principal = {
        "Service": "ec2.amazonaws.com",
        "AWS": [f"arn:aws:iam::{ACCOUNT}:user/admin", *trusts],
    }
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}],
    }
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
    doc = (
        grant
        if isinstance(grant, dict)
        else {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": grant, "Resource": "*"}],
        }
    )
    iam.put_role_policy(RoleName=name, PolicyName="node", PolicyDocument=json.dumps(doc))
    iam.create_instance_profile(InstanceProfileName=name)
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return name
