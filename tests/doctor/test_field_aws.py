"""The field preflight against AWS (moto's server, in a process of its own, IAM enforced): a
healthy pool passes every check, then each thing a first deployment gets wrong is broken in turn
and fails (or warns) naming the resource and the fix, before anything is bought.

The munge key's check assumes the pool's role and reads the parameter as it: moto checks the
role's own policy on that call (it has no policy simulator, so that is how a role's rights are
tested here). Expected verdicts come from each test's own setup: which rule, subnet or grant it
removed.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any

import boto3
import pytest

from provisioner.act.aws import AwsClients
from provisioner.act.field_aws import AwsFieldPreflight
from provisioner.act.field_preflight import SlurmNet
from provisioner.act.ports import CloudPorts
from provisioner.config.models import NodeBootstrap, Policy, PoolPolicy
from provisioner.doctor.field import field_checks
from provisioner.domain.checks import Check
from provisioner.testing.moto_faults import iam_enforcing_moto

pytestmark = [pytest.mark.aws]

REGION = "us-east-1"
CONTROLLER = "192.0.2.10"  # slurmctld on-prem, reached over the VPN
PARAM = "/gpu-burst/munge-key"
NET = SlurmNet(ip_address(CONTROLLER), 6817, 6818, (60001, 63000))
LIVE = {
    "SlurmctldParameters": "enable_configless",
    "SlurmctldPort": "6817",
    "SlurmdPort": "6818",
    "SrunPortRange": "60001-63000",
}


@pytest.fixture(scope="module")
def moto() -> Iterator[tuple[str, boto3.session.Session]]:
    with iam_enforcing_moto() as endpoint:
        iam = boto3.client(
            "iam", region_name=REGION, endpoint_url=endpoint,
            aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap",
        )  # fmt: skip
        iam.create_user(UserName="controller")
        everything = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
        iam.put_user_policy(
            UserName="controller", PolicyName="all", PolicyDocument=json.dumps(everything)
        )
        k = iam.create_access_key(UserName="controller")["AccessKey"]
        yield (
            endpoint,
            boto3.session.Session(
                aws_access_key_id=k["AccessKeyId"],
                aws_secret_access_key=k["SecretAccessKey"],
                region_name=REGION,
            ),
        )


@dataclass
class World:
    """One healthy pool's resources, made fresh for each test."""

    clients: AwsClients
    ec2: Any
    iam: Any
    image: str
    vpc: str
    subnet: str
    group: str
    profile: str
    pool: PoolPolicy
    node: NodeBootstrap

    def run(self, **pool_changes: Any) -> list[Check]:
        pool = self.pool.model_copy(update=pool_changes)
        return AwsFieldPreflight(self.clients).check_pool(
            pool, self.node, {REGION: self.image}, NET
        )


CONTROLLER_ARN = "arn:aws:iam::123456789012:user/controller"  # moto's account


def _role(iam: Any, name: str, action: str, trusts: str = CONTROLLER_ARN) -> str:
    """The node role: EC2 may assume it, and `trusts` (the controller, so the preflight may
    read as the role). moto answers a trust policy that names no AWS principal with a 500
    rather than AccessDenied, so every role here names one."""
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com", "AWS": trusts},
             "Action": "sts:AssumeRole"}
        ],
    }  # fmt: skip
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
    grant = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}],
    }
    iam.put_role_policy(RoleName=name, PolicyName="node", PolicyDocument=json.dumps(grant))
    iam.create_instance_profile(InstanceProfileName=name)
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return name


_WORLDS = itertools.count(20)


@pytest.fixture
def world(moto: tuple[str, boto3.session.Session]) -> World:
    endpoint, session = moto
    clients = AwsClients(endpoint, session=session)
    ec2, iam = clients.ec2(REGION), clients.client("iam", REGION)
    image = ec2.describe_images()["Images"][0]["ImageId"]
    n = next(_WORLDS)  # a VPC, group and role of this test's own
    vpc = ec2.create_vpc(CidrBlock=f"10.{n}.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(
        VpcId=vpc, CidrBlock=f"10.{n}.1.0/24", AvailabilityZone=f"{REGION}a"
    )["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName=f"burst-{n}", Description="burst nodes", VpcId=vpc)[
        "GroupId"
    ]
    ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 6818,
                "ToPort": 6818,
                "IpRanges": [{"CidrIp": f"{CONTROLLER}/32"}],
            },
            {
                "IpProtocol": "tcp",
                "FromPort": 6818,
                "ToPort": 6818,
                "UserIdGroupPairs": [{"GroupId": group}],
            },
        ],
    )  # fmt: skip  (egress: the group's default, all traffic anywhere)
    profile = _role(iam, f"burst-node-{n}", "ssm:GetParameter")
    clients.client("ssm", REGION).put_parameter(
        Name=PARAM, Value="a2V5" * 300, Type="SecureString", Overwrite=True
    )
    pool = PoolPolicy(
        name="cloud-aws",
        cloud="aws",
        regions=[REGION],
        instance_types=["p4d.24xlarge"],
        subnets=[subnet],
        security_groups=[group],
        instance_profile=profile,
    )
    node = NodeBootstrap(controller_host="slurmctld.site.internal", munge_key_parameter=PARAM)
    return World(clients, ec2, iam, image, vpc, subnet, group, profile, pool, node)


def verdicts(checks: list[Check]) -> dict[str, str]:
    return {c.name: c.verdict for c in checks}


def failing(checks: list[Check], verdict: str = "fail") -> list[Check]:
    got = [c for c in checks if c.verdict == verdict]
    assert all(c.fix for c in got), got  # every failure says how to fix it
    return got


def test_a_healthy_pool_passes_every_check(world: World) -> None:
    checks = world.run()
    assert set(verdicts(checks).values()) == {"ok"}, [c.line() for c in checks]
    names = set(verdicts(checks))
    assert {
        f"pool cloud-aws image ({REGION})",
        f"pool cloud-aws network ({REGION})",
        f"pool cloud-aws security groups ({REGION})",
        "pool cloud-aws instance profile",
        "pool cloud-aws munge key",
    } <= names
    assert any(n.startswith("pool cloud-aws network ACL acl-") for n in names)


def test_an_image_not_in_the_region_fails_naming_it(world: World) -> None:
    checks = AwsFieldPreflight(world.clients).check_pool(
        world.pool, world.node, {REGION: "ami-0123456789abcdef0"}, NET
    )
    (bad,) = failing(checks)
    assert "ami-0123456789abcdef0" in bad.detail and REGION in bad.detail
    assert "copy-image" in bad.fix


def test_a_subnet_that_does_not_exist_fails_naming_it(world: World) -> None:
    (bad,) = failing(world.run(subnets=["subnet-0123456789abcdef0"]))
    assert "subnet-0123456789abcdef0" in bad.detail and "subnets" in bad.fix


def test_a_subnet_of_another_region_fails(world: World) -> None:
    west = world.clients.ec2("us-west-2")
    vpc = west.create_vpc(CidrBlock="10.250.0.0/16")["Vpc"]["VpcId"]
    other = west.create_subnet(VpcId=vpc, CidrBlock="10.250.1.0/24")["Subnet"]["SubnetId"]
    (bad,) = failing(world.run(subnets=[other]))
    assert other in bad.detail and REGION in bad.detail


def test_a_security_group_of_another_vpc_fails_naming_both(world: World) -> None:
    vpc = world.ec2.create_vpc(CidrBlock="10.251.0.0/16")["Vpc"]["VpcId"]
    other = world.ec2.create_security_group(GroupName="elsewhere", Description="x", VpcId=vpc)
    (bad,) = failing(world.run(security_groups=[other["GroupId"]]))
    assert other["GroupId"] in bad.detail and world.vpc in bad.detail


def test_a_group_that_does_not_let_slurmctld_reach_slurmd_fails_naming_the_port(
    world: World,
) -> None:
    world.ec2.revoke_security_group_ingress(
        GroupId=world.group,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 6818, "ToPort": 6818,
             "IpRanges": [{"CidrIp": f"{CONTROLLER}/32"}]}
        ],
    )  # fmt: skip
    (bad,) = failing(world.run())
    assert bad.name == f"pool cloud-aws security groups ({REGION})"
    assert f"ingress tcp 6818 {CONTROLLER}/32" in bad.detail
    assert "fan-out" not in bad.detail  # the pool's own VMs still reach each other


def test_egress_to_https_only_closes_slurmctld_and_srun(world: World) -> None:
    world.ec2.revoke_security_group_egress(
        GroupId=world.group,
        IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    )
    world.ec2.authorize_security_group_egress(
        GroupId=world.group,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443,
             "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
        ],
    )  # fmt: skip
    (bad,) = failing(world.run())
    assert f"egress tcp 6817 {CONTROLLER}/32" in bad.detail
    assert f"egress tcp 60001-63000 {CONTROLLER}/32" in bad.detail


def test_a_network_acl_that_denies_part_of_the_srun_range_fails_naming_those_ports(
    world: World,
) -> None:
    acl = world.ec2.create_network_acl(VpcId=world.vpc)["NetworkAcl"]["NetworkAclId"]
    for egress in (True, False):
        world.ec2.create_network_acl_entry(
            NetworkAclId=acl, RuleNumber=100, Protocol="-1", RuleAction="allow",
            Egress=egress, CidrBlock="0.0.0.0/0",
        )  # fmt: skip
    world.ec2.create_network_acl_entry(
        NetworkAclId=acl, RuleNumber=50, Protocol="6", RuleAction="deny", Egress=True,
        CidrBlock="192.0.2.0/24", PortRange={"From": 62000, "To": 63000},
    )  # fmt: skip
    assoc = world.ec2.describe_network_acls(
        Filters=[{"Name": "association.subnet-id", "Values": [world.subnet]}]
    )["NetworkAcls"][0]["Associations"]
    (mine,) = [a for a in assoc if a["SubnetId"] == world.subnet]
    world.ec2.replace_network_acl_association(
        AssociationId=mine["NetworkAclAssociationId"], NetworkAclId=acl
    )
    (bad,) = failing(world.run())
    assert bad.name == f"pool cloud-aws network ACL {acl} ({REGION})"
    assert "egress tcp 62000-63000" in bad.detail and "60001" not in bad.detail


def test_an_instance_profile_that_does_not_exist_fails_naming_it(world: World) -> None:
    (bad,) = failing(world.run(instance_profile="no-such-profile"))
    assert "no-such-profile" in bad.detail


def test_a_role_that_may_not_read_the_parameter_fails(world: World) -> None:
    profile = _role(world.iam, world.profile + "-blind", "ec2:DescribeInstances")
    (bad,) = failing(world.run(instance_profile=profile))
    assert bad.name == "pool cloud-aws munge key"
    assert profile in bad.detail and PARAM in bad.detail and "AccessDenied" in bad.detail
    assert "ssm:GetParameter" in bad.fix


def test_a_role_the_controller_may_not_assume_is_a_warning_not_a_verdict(world: World) -> None:
    other = "arn:aws:iam::123456789012:user/someone-else"
    profile = _role(world.iam, world.profile + "-closed", "ssm:GetParameter", trusts=other)
    (warned,) = failing(world.run(instance_profile=profile), "warn")
    assert warned.name == "pool cloud-aws munge key" and "could not assume" in warned.detail
    assert not failing(world.run(instance_profile=profile))


def test_a_parameter_that_does_not_exist_fails(world: World) -> None:
    node = world.node.model_copy(update={"munge_key_parameter": "/gpu-burst/nope"})
    checks = AwsFieldPreflight(world.clients).check_pool(
        world.pool, node, {REGION: world.image}, NET
    )
    (bad,) = failing(checks)
    assert "/gpu-burst/nope" in bad.detail and "ParameterNotFound" in bad.detail


def _policy(world: World, **node: Any) -> Policy:
    return Policy(
        controller="field-test",
        pools=[world.pool],
        node=world.node.model_copy(update={"images": {"aws": world.image}, **node}),
    )


def _ports(world: World) -> dict[str, CloudPorts]:
    field = AwsFieldPreflight(world.clients)
    return {"aws": CloudPorts(driver=None, capacity=None, field=field)}  # type: ignore[arg-type]


def test_the_doctor_resolves_the_controller_and_reads_the_live_ports(world: World) -> None:
    site = {"slurmctld.site.internal": [CONTROLLER]}
    checks = field_checks(_policy(world), _ports(world), LIVE, resolve=lambda h: site.get(h, []))
    assert set(verdicts(checks).values()) == {"ok"}, [c.line() for c in checks]

    moved = {**LIVE, "SlurmdPort": "7818"}  # the live cluster's slurmd port, not the default
    checks = field_checks(_policy(world), _ports(world), moved, resolve=lambda h: site[h])
    (bad,) = failing(checks)
    assert f"ingress tcp 7818 {CONTROLLER}/32" in bad.detail


def test_an_unresolved_controller_host_fails_and_skips_the_rule_checks(world: World) -> None:
    checks = field_checks(_policy(world), _ports(world), LIVE, resolve=lambda h: [])
    (bad,) = failing(checks)
    assert bad.name == "controller_host" and "slurmctld.site.internal" in bad.detail
    assert verdicts(checks)[f"pool cloud-aws reachability ({REGION})"] == "skip"


@pytest.mark.parametrize(
    ("live", "name", "needle"),
    [
        ({**LIVE, "SlurmctldParameters": "(null)"}, "slurm configless", "enable_configless"),
        ({**LIVE, "SrunPortRange": "0-0"}, "slurm srun ports", "SrunPortRange=60001-63000"),
    ],
)
def test_configless_off_or_no_srun_range_fails(
    world: World, live: dict[str, str], name: str, needle: str
) -> None:
    checks = field_checks(_policy(world), _ports(world), live, resolve=lambda h: [CONTROLLER])
    (bad,) = failing(checks)
    assert bad.name == name and needle in bad.fix


def test_the_same_host_stand_in_has_nothing_to_check(world: World) -> None:
    policy = _policy(world, node_address="registration")
    (only,) = field_checks(policy, _ports(world), LIVE, resolve=lambda h: [])
    assert only.verdict == "skip"


def test_a_pool_with_no_subnets_is_placed_in_the_default_vpc(world: World) -> None:
    checks = world.run(subnets=[], security_groups=[])
    placed = {c.name: c for c in checks}[f"pool cloud-aws network ({REGION})"]
    (default_vpc,) = world.ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])[
        "Vpcs"
    ]
    assert placed.verdict == "ok" and default_vpc["VpcId"] in placed.detail
