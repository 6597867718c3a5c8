"""AWS's field preflight: for each region of a pool, against EC2, IAM, STS and SSM themselves:

- the image exists in that region (an AMI is regional: one copied to another region has a new id);
- the subnets exist there (else the region's default VPC and its default subnets), and the
  security groups exist in the same VPC (else that VPC's default group);
- the security groups (stateful) and the subnets' network ACLs (stateless) let Slurm's flows
  through to and from slurmctld's address (domain/reachability.py: evaluated from the rules);
- the instance profile exists and holds a role;
- that role may read the munge key's SSM parameter: the preflight assumes the role and reads the
  parameter with it. A role whose trust policy admits EC2 alone cannot be assumed by the
  controller: that is a warning (nothing proved either way), with the way to let it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from ipaddress import ip_network
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from provisioner.act.aws import AwsClients
from provisioner.act.field_preflight import Missing, SlurmNet
from provisioner.config.models import NodeBootstrap, PoolPolicy
from provisioner.domain.checks import Check
from provisioner.domain.reachability import (
    Network,
    Rule,
    reach_check,
    rule_protocol,
    slurm_flows,
)

SESSION = "gpu-burst-preflight"


def _code(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return f"{err.get('Code', 'Error')}: {err.get('Message', '')}".strip()
    return f"{type(exc).__name__}: {exc}"


class AwsFieldPreflight:
    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients

    def check_pool(
        self, pool: PoolPolicy, node: NodeBootstrap, images: Mapping[str, str], net: SlurmNet
    ) -> list[Check]:
        out: list[Check] = []
        for region in pool.regions:
            ec2 = self.clients.ec2(region)
            out.append(self._image(pool, region, images.get(region, ""), ec2))
            out += self._network(pool, region, ec2, net)
        out += self._role_and_secret(pool, node)
        return out

    def _image(self, pool: PoolPolicy, region: str, image: str, ec2: Any) -> Check:
        name = f"pool {pool.name} image ({region})"
        if not image:
            return Check(name, "fail", "no image", f"set node.images['aws/{region}']")
        try:
            found = ec2.describe_images(ImageIds=[image]).get("Images", [])
        except (ClientError, BotoCoreError) as exc:
            found, why = [], _code(exc)
        else:
            why = "no such image"
        if not found:
            return Check(
                name,
                "fail",
                f"{image} is not in {region} ({why})",
                f"copy the AMI to {region} (aws ec2 copy-image) and set "
                f"node.images['aws/{region}'] to the new id",
            )
        return Check(name, "ok", f"{image} ({found[0].get('Name', '')}) exists in {region}")

    def _network(self, pool: PoolPolicy, region: str, ec2: Any, net: SlurmNet) -> list[Check]:
        name = f"pool {pool.name} network ({region})"
        try:
            vpc, subnets = self._subnets(pool, region, ec2)
            groups = self._groups(pool, vpc, ec2)
        except Missing as m:
            return [Check(name, "fail", m.detail, m.fix)]
        except (ClientError, BotoCoreError) as exc:
            return [Check(name, "fail", _code(exc), "check the controller's ec2:Describe* rights")]
        cidrs = [ip_network(s["CidrBlock"]) for s in subnets]
        ids = [s["SubnetId"] for s in subnets]
        placed = Check(
            name, "ok", f"{vpc}: subnet(s) {', '.join(ids)}; group(s) {', '.join(groups)}"
        )
        if net.controller is None:
            skip = "controller_host does not resolve: nothing to evaluate the rules against"
            return [placed, Check(f"pool {pool.name} reachability ({region})", "skip", skip)]
        flows = slurm_flows(
            net.controller,
            cidrs,
            slurmctld_port=net.slurmctld_port,
            slurmd_port=net.slurmd_port,
            srun_ports=net.srun_ports,
        )
        sg_rules = _group_rules(
            ec2.describe_security_groups(GroupIds=groups)["SecurityGroups"], set(groups), cidrs
        )
        acls = ec2.describe_network_acls(
            Filters=[{"Name": "association.subnet-id", "Values": ids}]
        )["NetworkAcls"]
        return [
            placed,
            reach_check(
                f"pool {pool.name} security groups ({region})",
                flows,
                sg_rules,
                stateless=False,
                fix=f"in {', '.join(groups)}: let in slurmd's port from {net.controller}/32 "
                "and from the group itself; let out SlurmctldPort and SrunPortRange to "
                f"{net.controller}/32",
            ),
            *(
                reach_check(
                    f"pool {pool.name} network ACL {acl['NetworkAclId']} ({region})",
                    flows,
                    _acl_rules(acl),
                    stateless=True,
                    fix="add allow entries below the deny ones, both ways (an ACL is stateless)",
                )
                for acl in acls
            ),
        ]

    def _subnets(self, pool: PoolPolicy, region: str, ec2: Any) -> tuple[str, list[Any]]:
        if pool.subnets:
            try:
                subnets = ec2.describe_subnets(SubnetIds=list(pool.subnets))["Subnets"]
            except ClientError as exc:
                raise Missing(
                    f"subnet(s) {', '.join(pool.subnets)} not all in {region}: {_code(exc)}",
                    f"pools[{pool.name}].subnets: name subnets of {region} (a subnet lives in "
                    "one region and one zone)",
                ) from None
            vpcs = {s["VpcId"] for s in subnets}
            if len(vpcs) > 1:
                raise Missing(
                    f"subnets span VPCs {', '.join(sorted(vpcs))}",
                    f"pools[{pool.name}].subnets: name subnets of one VPC",
                )
            return vpcs.pop(), subnets
        default = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
        if not default:
            raise Missing(
                f"no subnets named and {region} has no default VPC",
                f"pools[{pool.name}].subnets: name the burst subnets",
            )
        vpc = default[0]["VpcId"]
        subnets = ec2.describe_subnets(
            Filters=[
                {"Name": "vpc-id", "Values": [vpc]},
                {"Name": "default-for-az", "Values": ["true"]},
            ]
        )["Subnets"]
        return vpc, subnets

    def _groups(self, pool: PoolPolicy, vpc: str, ec2: Any) -> list[str]:
        if not pool.security_groups:
            found = ec2.describe_security_groups(
                Filters=[
                    {"Name": "vpc-id", "Values": [vpc]},
                    {"Name": "group-name", "Values": ["default"]},
                ]
            )["SecurityGroups"]
            return [g["GroupId"] for g in found]
        try:
            found = ec2.describe_security_groups(GroupIds=list(pool.security_groups))[
                "SecurityGroups"
            ]
        except ClientError as exc:
            raise Missing(
                f"security group(s) {', '.join(pool.security_groups)}: {_code(exc)}",
                f"pools[{pool.name}].security_groups: name groups of {vpc}",
            ) from None
        elsewhere = [g["GroupId"] for g in found if g.get("VpcId") != vpc]
        if elsewhere:
            raise Missing(
                f"security group(s) {', '.join(elsewhere)} are not in {vpc}, the subnets' VPC",
                f"pools[{pool.name}].security_groups: name groups of {vpc}",
            )
        return [g["GroupId"] for g in found]

    def _role_and_secret(self, pool: PoolPolicy, node: NodeBootstrap) -> list[Check]:
        if not pool.instance_profile:
            return []
        region = pool.regions[0]
        name = f"pool {pool.name} instance profile"
        profile_name = pool.instance_profile.rsplit("/", 1)[-1]
        try:
            profile = self.clients.client("iam", region).get_instance_profile(
                InstanceProfileName=profile_name
            )["InstanceProfile"]
        except (ClientError, BotoCoreError) as exc:
            return [
                Check(
                    name,
                    "fail",
                    f"{pool.instance_profile}: {_code(exc)}",
                    "create it (aws iam create-instance-profile) with the node role in it, "
                    "see docs/field.md",
                )
            ]
        roles = profile.get("Roles", [])
        if not roles:
            return [Check(name, "fail", f"{profile_name} holds no role", "add the node role")]
        role_arn = roles[0]["Arn"]
        out = [Check(name, "ok", f"{profile_name} holds {role_arn}")]
        if node.munge_key_parameter:
            out.append(self._secret(pool, region, role_arn, node.munge_key_parameter))
        return out

    def _secret(self, pool: PoolPolicy, region: str, role_arn: str, parameter: str) -> Check:
        name = f"pool {pool.name} munge key"
        try:
            creds = self.clients.client("sts", region).assume_role(
                RoleArn=role_arn, RoleSessionName=SESSION
            )["Credentials"]
        except (ClientError, BotoCoreError) as exc:
            return Check(
                name,
                "warn",
                f"could not assume {role_arn} to read {parameter} as it: {_code(exc)}",
                "let the controller's principal assume the role (its trust policy), or check "
                "with the IAM policy simulator that it may ssm:GetParameter",
            )
        import boto3

        as_role = AwsClients(
            self.clients.endpoint_url,
            session=boto3.session.Session(
                aws_access_key_id=creds["AccessKeyId"],
                aws_secret_access_key=creds["SecretAccessKey"],
                aws_session_token=creds["SessionToken"],
            ),
        )
        try:
            value = as_role.client("ssm", region).get_parameter(
                Name=parameter, WithDecryption=True
            )["Parameter"]["Value"]
        except (ClientError, BotoCoreError) as exc:
            return Check(
                name,
                "fail",
                f"{role_arn} may not read {parameter} in {region}: {_code(exc)}",
                f"put the parameter in {region} (SecureString) and grant the role "
                "ssm:GetParameter on it and kms:Decrypt on its key (docs/field.md)",
            )
        return Check(name, "ok", f"{role_arn} read {parameter} ({len(value)} characters)")


def _group_rules(groups: Sequence[Any], own: set[str], subnets: Sequence[Network]) -> list[Rule]:
    """A security group's permissions as rules; a permission that names one of the VM's own
    groups lets in every VM of the pool, so it stands for the pool's subnets."""
    rules: list[Rule] = []
    for g in groups:
        for key, direction in (("IpPermissions", "ingress"), ("IpPermissionsEgress", "egress")):
            for perm in g.get(key, []):
                peers: list[Network] = [ip_network(r["CidrIp"]) for r in perm.get("IpRanges", [])]
                peers += [ip_network(r["CidrIpv6"]) for r in perm.get("Ipv6Ranges", [])]
                if any(p.get("GroupId") in own for p in perm.get("UserIdGroupPairs", [])):
                    peers += list(subnets)
                proto = rule_protocol(perm.get("IpProtocol", "-1"))
                # only a TCP rule's ports matter; others (ESP, GRE) may carry none at all
                ports = (perm["FromPort"], perm["ToPort"]) if proto == "tcp" else None
                rules.append(Rule(direction, proto, ports, tuple(peers), name=g["GroupId"]))  # type: ignore[arg-type]
    return rules


def _acl_rules(acl: Any) -> list[Rule]:
    rules: list[Rule] = []
    for e in acl.get("Entries", []):
        cidr = e.get("CidrBlock") or e.get("Ipv6CidrBlock")
        if not cidr:
            continue
        proto = rule_protocol(e.get("Protocol", "-1"))
        pr = e.get("PortRange")
        ports = (pr["From"], pr["To"]) if pr and proto != "all" else None
        rules.append(
            Rule(
                "egress" if e.get("Egress") else "ingress",
                proto,
                ports,
                (ip_network(cidr),),
                allow=e.get("RuleAction") == "allow",
                priority=int(e.get("RuleNumber", 32767)),
            )
        )
    return rules
