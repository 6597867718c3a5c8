"""Binding by identity on GCE, on hosts of their own: each VM the GCE fake created for a
managed instance group boots from the user-data item the fake recorded in that instance's
metadata, asks its own metadata server stand-in (inside its own namespace, answering from the
fake) which node it is, and gets the node the controller named on that instance (the metadata
item slurm-node, set with setMetadata), whatever order the VMs boot in."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.act.ports import OwnedInstance, PoolSpec, request_token
from provisioner.act.retry import cloud_retrying
from provisioner.act.userdata import NodeBootstrap, render_user_data
from provisioner.domain.offers import CapacityType
from provisioner.testing import hosts
from provisioner.testing.fake_gce import FakeGCE
from tests.hosts.conftest import host_root

pytestmark = [pytest.mark.testhosts, pytest.mark.gcp]

CTL = "burst-ctl"
PROJECT = "burst-proj"


def _spec(user_data: str = "") -> PoolSpec:
    return PoolSpec(
        pool="burst",
        cloud="gcp",
        region="us-central1",
        instance_type="a2-highgpu-1g",
        capacity=CapacityType.SPOT,
        gpu_model="A100",
        gpus=1,
        max_size=4,
        image="projects/deeplearning-platform-release/global/images/family/x",
        controller=CTL,
        team="vision",
        decision_id="d-1",
        project=PROJECT,
        zones=("us-central1-a",),
        user_data=user_data,
    )


def test_two_gce_vms_booted_in_either_order_each_learn_the_node_named_for_them(
    gce_on_test_net: FakeGCE, tmp_path: Path, suite: str
) -> None:
    from google.auth.credentials import AnonymousCredentials

    from provisioner.act.gcp import GcpCapacity, GcpClients, GcpPoolDriver

    root = host_root(suite)
    fake = gce_on_test_net
    clients = GcpClients(PROJECT, fake.endpoint, credentials=AnonymousCredentials())
    boot = NodeBootstrap(controller_host=hosts.HOST_ADDRESS, join_deadline_s=120)
    spec = _spec(render_user_data(_spec(), boot))
    retrying = cloud_retrying()
    GcpPoolDriver(clients, retrying).ensure(spec)
    capacity = GcpCapacity(clients, retrying)
    capacity.resize(spec, 2, request_token("up", 2))
    first, second = sorted(capacity.list_owned(CTL), key=lambda o: o.instance_id)
    named = {first.instance_id: "burst-2", second.instance_id: "burst-1"}
    capacity.name_node(first, named[first.instance_id])  # before its VM boots

    def recorded(o: OwnedInstance) -> dict[str, Any]:
        return fake.instances[(o.zone, o.instance_id)]

    def user_data(o: OwnedInstance) -> str:
        items = {i["key"]: i["value"] for i in recorded(o)["metadata"]["items"]}
        return str(items["user-data"])

    specs = [
        hosts.HostSpec(
            str(recorded(o)["id"]),
            o.instance_id,  # GCE: the hostname is the instance's name
            int(o.private_ip.rsplit(".", 1)[1]),
            user_data(o),
            extra_meta={"gce-name": o.instance_id},
        )
        for o in (second, first)  # the later one boots first
    ]

    def sidecar(s: hosts.HostSpec) -> list[str]:
        return [
            sys.executable,
            "-m",
            "provisioner.testing.gce_metadata",
            "--endpoint",
            fake.endpoint,
            "--project",
            PROJECT,
            "--zone",
            "us-central1-a",
            "--instance",
            s.extra_meta["gce-name"],
        ]

    with hosts.hosts(specs, root, tmp_path, sidecar=sidecar) as booted:
        capacity.name_node(second, named[second.instance_id])  # its VM is up and waiting
        joined = {
            h.spec.hostname: json.loads(h.wait_inside("/run/gpu-burst/joined.json", 120))
            for h in booted
        }
        schema = [h.exec("cloud-init", "schema", "--system") for h in booted]
    truth = {o.instance_id: (str(recorded(o)["id"]), o.private_ip) for o in (first, second)}
    for name, got in joined.items():
        gce_id, address = truth[name]
        assert got == {"instance_id": gce_id, "node": named[name], "address": address}
    assert [s.returncode for s in schema] == [0, 0], [s.stdout + s.stderr for s in schema]
