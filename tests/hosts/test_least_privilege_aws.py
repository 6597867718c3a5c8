"""The AWS join, end to end, with the controller holding exactly the least-privilege policy
docs/field.md gives (infra/iam/aws-controller-policy.json) and nothing more: moto's server in a
process of its own with IAM enforcement on judges every call the controller makes by that
policy, and every call the VM makes by its role's.

First the field preflight, as that controller: image, subnet and security group, the group's
rules against the live cluster's ports, the instance profile, and the munge key read as the
node role. Then a job bursts: the launch template and the group are made, the VM boots, reads
its key from SSM as its role, is named, joins, runs the job and, idle, is terminated. Any call
the policy lacks would be an AccessDenied on the way; none may happen.

What moto cannot judge, and a real account must: it evaluates EC2, Auto Scaling and SSM actions
against resource "*" only, and never asks for iam:PassRole, so the resource scoping of the node
role's policy and the PassRole grant are not proved here (docs/field.md says so).
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.bootstrap import build_clouds
from provisioner.doctor.field import field_checks, slurm_config
from provisioner.domain.jobs import JobState
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms, host_files, imds_sidecar, moto_lister
from tests.hosts.conftest import HostCluster, fresh_key_cluster_of, host_root
from tests.hosts.join_world import (
    ACCOUNT,
    REGION,
    REPO,
    Driver,
    S,
    aws_client,
    job_state,
    make_controller,
    node_profile,
    subnet_on_test_net,
)

pytestmark = [pytest.mark.testhosts, pytest.mark.aws, pytest.mark.slurm, pytest.mark.e2e]

POLICY = REPO / "infra" / "iam" / "aws-controller-policy.json"
PARAM = "/gpu-burst/burst-local/cloud-aws/munge-key"
CONTROLLER_USER = "gpu-burst-controller"


@pytest.fixture(params=["bookworm"])  # the policy is the controller's: one Slurm suffices
def suite(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh_key_cluster(
    test_network: str, suite: str, tmp_path: Path
) -> Iterator[tuple[HostCluster, bytes]]:
    yield from fresh_key_cluster_of(suite, tmp_path)


def controller_keys(endpoint: str, admin: tuple[str, str]) -> tuple[str, str]:
    """A user holding the field policy, and only it."""
    iam = aws_client("iam", endpoint, admin)
    iam.create_user(UserName=CONTROLLER_USER)
    iam.put_user_policy(
        UserName=CONTROLLER_USER, PolicyName="field", PolicyDocument=POLICY.read_text()
    )
    k = iam.create_access_key(UserName=CONTROLLER_USER)["AccessKey"]
    return k["AccessKeyId"], k["SecretAccessKey"]


def test_the_controller_bursts_joins_and_ends_a_vm_with_the_field_policy_alone(
    fresh_key_cluster: tuple[HostCluster, bytes],
    enforcing_moto: tuple[str, tuple[str, str]],
    tmp_path: Path,
    suite: str,
) -> None:
    cluster, key = fresh_key_cluster
    endpoint, admin = enforcing_moto
    keys = controller_keys(endpoint, admin)
    doc = json.loads(POLICY.read_text())
    assert "*" not in {a for s in doc["Statement"] for a in s["Action"]}  # no action wildcard

    # The site's side, made by its administrator: the key in SSM, the node role, the network.
    aws_client("ssm", endpoint, admin).put_parameter(
        Name=PARAM, Value=base64.b64encode(key).decode(), Type="SecureString"
    )
    profile = node_profile(
        endpoint, admin, "gpu-burst-node", "ssm:GetParameter",
        trusts=(f"arn:aws:iam::{ACCOUNT}:user/{CONTROLLER_USER}",),
    )  # fmt: skip
    ec2 = aws_client("ec2", endpoint, admin)
    subnet = subnet_on_test_net(ec2)
    vpc = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["VpcId"]
    group = ec2.create_security_group(
        GroupName="gpu-burst-nodes", Description="burst nodes", VpcId=vpc
    )["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": cluster.port + 1, "ToPort": cluster.port + 1,
             "IpRanges": [{"CidrIp": f"{hosts.HOST_ADDRESS}/32"}],
             "UserIdGroupPairs": [{"GroupId": group}]},
        ],
    )  # fmt: skip

    from provisioner.config import load_policy
    from tests.hosts.join_world import POLICIES

    pools = [
        p.model_copy(update={"instance_profile": profile, "security_groups": [group]})
        for p in load_policy(POLICIES).pools
    ]
    c = make_controller(
        cluster,
        endpoint,
        subnet,
        tmp_path,
        pools=pools,
        node={"munge_key_parameter": PARAM, "ssm_endpoint": endpoint},
        aws_keys=keys,
    )

    # The field preflight, as this controller, against the live cluster.
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=keys[0], aws_secret_access_key=keys[1], region_name=REGION
    )
    clouds = build_clouds(c.settings, c.policy, aws_session=session)
    live = slurm_config(cluster.sh("scontrol", "show", "config"))
    checks = field_checks(c.policy, clouds, live)
    assert {x.verdict for x in checks} == {"ok"}, [x.line() for x in checks]

    vms = CloudVms(
        host_root(suite),
        tmp_path / "vms",
        moto_lister(ec2, c.policy.controller, TAG_CONTROLLER),
        imds_sidecar(sys.executable, endpoint, REGION),
        files=host_files(host_root(suite), cluster.munge_socket, gpus=8),
    )
    drive = Driver(c, vms)
    try:
        job = cluster.sh(
            "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
            "--chdir=/tmp", "-o", "/dev/null", "--wrap", "true",
        ).strip().split(";")[0]  # fmt: skip
        drive.until("the job to complete", lambda: job_state(c, job) is JobState.COMPLETED, 300)

        def ended() -> bool:
            return {si.instance.state for si in c.store.instances()} == {S.TERMINATED}

        drive.until("the instance to be terminated", ended, 180)
        assert len(vms.booted) == 1
        denied = [e for e in drive.errors if "AccessDenied" in e or "UnauthorizedOperation" in e]
        assert not denied, denied
    finally:
        vms.close()
