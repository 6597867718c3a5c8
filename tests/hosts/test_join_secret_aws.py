"""The munge key reaches a burst VM from SSM Parameter Store, read with the VM's own identity,
never from user-data or the image: the test cluster's key is a fresh one, not the key baked into
the test-host root, so a node that joins proves it read the parameter.

moto's server runs in a process of its own on the tests' /24 with IAM enforcement on
(INITIAL_NO_AUTH_ACTION_COUNT): the controller and the metadata stand-ins act as an
administrator; the VM's requests carry its instance profile role's credentials, which its
metadata stand-in hands out as EC2 does, and moto checks their signature and the role's policy.

- The pool's role may read the parameter: the VM joins and runs the job.
- Another pool's role may not (no ssm:GetParameter): SSM answers AccessDenied, the VM gets no
  key and no node, and the controller ends the instance at its join timeout.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.domain.jobs import JobState
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms, host_files, imds_sidecar, moto_lister
from tests.hosts.conftest import HostCluster, fresh_key_cluster_of, host_root
from tests.hosts.join_world import (
    REGION,
    Driver,
    S,
    all_ended,
    aws_client,
    job_state,
    make_controller,
    node_profile,
)

pytestmark = [pytest.mark.testhosts, pytest.mark.aws, pytest.mark.slurm, pytest.mark.e2e]

PARAM = "/gpu-burst/burst-local/cloud-aws/munge-key"


@pytest.fixture
def fresh_key_cluster(
    test_network: str, suite: str, tmp_path: Path
) -> Iterator[tuple[HostCluster, bytes]]:
    yield from fresh_key_cluster_of(suite, tmp_path)


@pytest.mark.parametrize("role", ["may-read", "may-not-read"])
def test_the_vm_reads_its_munge_key_with_its_own_role_or_gets_no_node(
    fresh_key_cluster: tuple[HostCluster, bytes],
    enforcing_moto: tuple[str, tuple[str, str]],
    tmp_path: Path,
    suite: str,
    role: str,
) -> None:
    cluster, key = fresh_key_cluster
    endpoint, keys = enforcing_moto
    root = host_root(suite)
    assert (root / "etc" / "munge" / "munge.key").read_bytes() != key  # not the image's key
    aws_client("ssm", endpoint, keys).put_parameter(
        Name=PARAM, Value=base64.b64encode(key).decode(), Type="SecureString"
    )
    action = "ssm:GetParameter" if role == "may-read" else "ec2:DescribeInstances"
    profile = node_profile(endpoint, keys, f"cloud-aws-{role}", action)
    ec2 = aws_client("ec2", endpoint, keys)
    vpc = ec2.create_vpc(CidrBlock=f"{hosts.SUBNET}.0/24")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(
        VpcId=vpc, CidrBlock=f"{hosts.SUBNET}.0/24", AvailabilityZone=f"{REGION}a"
    )["Subnet"]["SubnetId"]
    from provisioner.config import load_policy
    from tests.hosts.join_world import POLICIES

    pools = [
        p.model_copy(update={"instance_profile": profile}) for p in load_policy(POLICIES).pools
    ]
    c = make_controller(
        cluster,
        endpoint,
        subnet,
        tmp_path,
        pools=pools,
        node={"munge_key_parameter": PARAM, "ssm_endpoint": endpoint},
        aws_keys=keys,
        # the VM that may not read its key never joins: this test is about that timeout
        **({"join_timeout_s": 60.0} if role == "may-not-read" else {}),
    )
    vms = CloudVms(
        root,
        tmp_path / "vms",
        moto_lister(ec2, c.policy.controller, TAG_CONTROLLER),
        imds_sidecar(sys.executable, endpoint, REGION),
        files=host_files(root, cluster.munge_socket, gpus=8),
    )
    drive = Driver(c, vms)
    try:
        job = cluster.sh(
            "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
            "--chdir=/tmp", "-o", "/dev/null", "--wrap", "true",
        ).strip().split(";")[0]  # fmt: skip

        if role == "may-read":
            drive.until("the job to complete", lambda: job_state(c, job) is JobState.COMPLETED, 300)
            (vm,) = vms.booted
            got = vms.running[vm].exec("sha256sum", "/etc/munge/munge.key").stdout.split()[0]
            import hashlib

            assert got == hashlib.sha256(key).hexdigest()
        else:
            drive.until("the instance to end at its join timeout", lambda: all_ended(c), 180)
            assert job_state(c, job) is not JobState.COMPLETED
            reasons = [t.reason for si in c.store.instances() for t in si.instance.history]
            assert any("join" in r for r in reasons), reasons
            assert {si.instance.state for si in c.store.instances()} <= {S.TERMINATED, S.FAILED}
    finally:
        vms.close()
