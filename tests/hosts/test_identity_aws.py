"""Binding by identity, on hosts of their own: each VM that moto launched for a scale-up boots
from exactly the user-data moto recorded for it, asks its own metadata stand-in (inside its own
namespace, answering from moto) which node it is, and gets the node the controller named on
that instance, whatever order the VMs boot in. Identity is asserted from the cloud's records:
the instance id and private address moto holds, not the hostname the test wrote."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from provisioner.act.aws import AwsCapacity, AwsClients, AwsPoolDriver
from provisioner.act.ports import OwnedInstance, PoolSpec, request_token
from provisioner.act.retry import cloud_retrying
from provisioner.act.userdata import NodeBootstrap, render_user_data
from provisioner.domain.offers import CapacityType
from provisioner.testing import hosts
from tests.hosts.conftest import host_root

pytestmark = [pytest.mark.testhosts, pytest.mark.aws]

CTL = "burst-ctl"
REGION = "us-east-1"


def _spec(subnet: str, user_data: str = "") -> PoolSpec:
    return PoolSpec(
        pool="burst",
        cloud="aws",
        region=REGION,
        instance_type="p4d.24xlarge",
        capacity=CapacityType.SPOT,
        gpu_model="A100",
        gpus=8,
        max_size=4,
        image="ami-12c6146b",
        controller=CTL,
        team="vision",
        decision_id="d-1",
        subnets=(subnet,),
        user_data=user_data,
    )


def test_two_vms_booted_in_either_order_each_learn_the_node_named_for_them(
    moto_on_test_net: str, tmp_path: Path, suite: str
) -> None:
    root = host_root(suite)
    clients = AwsClients(moto_on_test_net)
    ec2 = clients.ec2(REGION)
    vpc = ec2.create_vpc(CidrBlock=f"{hosts.SUBNET}.0/24")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(
        VpcId=vpc, CidrBlock=f"{hosts.SUBNET}.0/24", AvailabilityZone=f"{REGION}a"
    )["Subnet"]["SubnetId"]
    boot = NodeBootstrap(controller_host=hosts.HOST_ADDRESS, join_deadline_s=120)
    spec = _spec(subnet)
    spec = _spec(subnet, render_user_data(spec, boot))
    retrying = cloud_retrying()
    AwsPoolDriver(clients, retrying).ensure(spec)
    capacity = AwsCapacity([REGION], clients, retrying)
    capacity.resize(spec, 2, request_token("up", 2))
    first, second = sorted(capacity.list_owned(CTL), key=lambda o: o.instance_id)
    # Crossed on purpose: the node names follow the controller's binding, not any order.
    named = {first.instance_id: "burst-2", second.instance_id: "burst-1"}
    capacity.name_node(first, named[first.instance_id])  # before its VM boots

    def recorded_user_data(o: OwnedInstance) -> str:
        out = ec2.describe_instance_attribute(InstanceId=o.instance_id, Attribute="userData")
        return base64.b64decode(out["UserData"]["Value"]).decode()

    specs = [
        hosts.HostSpec(
            o.instance_id,
            f"ip-{o.private_ip.replace('.', '-')}",
            int(o.private_ip.rsplit(".", 1)[1]),
            recorded_user_data(o),
        )
        for o in (second, first)  # the later one boots first
    ]
    assert [s.address for s in specs] == [second.private_ip, first.private_ip]

    def imds(s: hosts.HostSpec) -> list[str]:
        return [sys.executable, "-m", "provisioner.testing.imds", "--instance", s.instance_id]

    def sidecar(s: hosts.HostSpec) -> list[str]:
        return [*imds(s), "--endpoint", moto_on_test_net, "--region", REGION]

    with hosts.hosts(specs, root, tmp_path, sidecar=sidecar) as booted:
        # The second VM is up and waiting: it is named only now, and then learns it.
        capacity.name_node(second, named[second.instance_id])
        joined = {
            h.spec.instance_id: json.loads(h.wait_inside("/run/gpu-burst/joined.json", 120))
            for h in booted
        }
        slurmd = {h.spec.instance_id: h.wait_inside("/etc/default/slurmd", 30) for h in booted}
        schema = [h.exec("cloud-init", "schema", "--system") for h in booted]
    truth = {o.instance_id: o.private_ip for o in capacity.list_owned(CTL)}
    for iid, got in joined.items():
        assert got == {"instance_id": iid, "node": named[iid], "address": truth[iid]}
        want = f'SLURMD_OPTIONS="--conf-server {hosts.HOST_ADDRESS}:6817 -N {named[iid]}"\n'
        assert slurmd[iid] == want
    # cloud-init's own validator accepts the user-data each VM actually received.
    assert [s.returncode for s in schema] == [0, 0], [s.stdout + s.stderr for s in schema]
