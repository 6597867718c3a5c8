"""The join, end to end, with every burst VM a host of its own: the real controller against a
real slurmctld on the tests' /24 (scripts/slurm-up.sh BURST_NODES=hosts) and moto's server as
AWS. Nothing plays the node: each instance moto runs boots as a test host from the user-data moto
recorded for it, learns its node from its own metadata stand-in, starts munged and slurmd in
configless mode and joins slurmctld by address; Slurm runs the jobs there, across the network.

Identity is asserted, not assumed: each job prints the instance id its host reads from its own
metadata stand-in, and that must be the moto instance whose private address is Slurm's NodeAddr
for the node the job ran on, and the instance the controller bound to that node.

On Slurm 22.05 (Debian 12 hosts) and 24.11 (Debian 13 hosts), in both boot orders.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import boto3
import pytest

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.bootstrap import Controller, build_clouds, build_controller, load_settings
from provisioner.clock import ManualClock
from provisioner.config import load_policy
from provisioner.domain.instances import InstanceState
from provisioner.domain.jobs import JobState
from provisioner.store import Store
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms, host_files, imds_sidecar, moto_lister
from provisioner.testing.moto_faults import FaultyMotoServer
from tests.hosts.conftest import HostCluster, host_root

pytestmark = [pytest.mark.testhosts, pytest.mark.aws, pytest.mark.slurm, pytest.mark.e2e]

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


@pytest.fixture
def moto_on_test_net(test_network: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    server = FaultyMotoServer(host=test_network).start()
    server.reset()
    try:
        yield server.endpoint
    finally:
        server.stop()


def _ec2(endpoint: str) -> Any:
    return boto3.client(
        "ec2",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _controller(cluster: HostCluster, endpoint: str, subnet: str, tmp: Path) -> Controller:
    base = load_policy(POLICIES)
    node = base.node.model_copy(
        update={
            "controller_host": hosts.HOST_ADDRESS,
            "controller_port": cluster.port,
            "node_address": "instance",
            "join_deadline_s": 120,
        }
    )
    pools = [p.model_copy(update={"subnets": [subnet]}) for p in base.pools]
    policy = base.model_copy(update={"node": node, "pools": pools})
    settings = load_settings(
        store_url=f"sqlite:///{tmp / 'controller.sqlite'}",
        policies=POLICIES,
        slurm_mode="cli",
        slurm_conf=cluster.env["SLURM_CONF"],
        slurm_bin_dir=cluster.env.get("SLURM_BIN_DIR") or None,
        state_dir=cluster.env["PROVISIONER_STATE_DIR"],
        aws_endpoint_url=endpoint,
        pool_driver="sdk",
        tick_s=0.5,
    )
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    return build_controller(
        settings,
        clock=ManualClock(datetime.now(UTC)),
        store=Store(settings.store_url),
        policy=policy,
        clouds=build_clouds(settings, policy, aws_session=session),
    )


class Driver:
    """Passes of the controller (its clock set to the wall clock first), each after the cloud
    stand-in's hypervisor booted or removed hosts, until a condition holds."""

    def __init__(self, c: Controller, vms: CloudVms) -> None:
        self.c = c
        self.vms = vms
        self.errors: list[str] = []

    def until(self, what: str, cond: Callable[[], T | None], timeout: float) -> T:
        deadline = time.monotonic() + timeout
        while True:
            self.vms.sync()
            assert isinstance(self.c.clock, ManualClock)
            self.c.clock.set(datetime.now(UTC))
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
                pytest.fail(
                    f"timed out waiting for {what}: nodes={nodes} jobs={jobs} instances={insts} "
                    f"errors={self.errors[-5:]} consoles={consoles}"
                )
            time.sleep(0.5)


@pytest.mark.parametrize("order", ["launch-order", "reversed"])
def test_two_vms_join_as_their_own_nodes_run_jobs_and_leave(
    host_cluster: HostCluster, moto_on_test_net: str, tmp_path: Path, suite: str, order: str
) -> None:
    root = host_root(suite)
    ec2 = _ec2(moto_on_test_net)
    vpc = ec2.create_vpc(CidrBlock=f"{hosts.SUBNET}.0/24")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(
        VpcId=vpc, CidrBlock=f"{hosts.SUBNET}.0/24", AvailabilityZone=f"{REGION}a"
    )["Subnet"]["SubnetId"]
    c = _controller(host_cluster, moto_on_test_net, subnet, tmp_path)
    ctl = c.policy.controller
    vms = CloudVms(
        root,
        tmp_path / "vms",
        moto_lister(ec2, ctl, TAG_CONTROLLER),
        imds_sidecar(sys.executable, moto_on_test_net, REGION),
        files=host_files(root, host_cluster.munge_socket, gpus=8),
        newest_first=order == "reversed",
    )
    drive = Driver(c, vms)
    script = host_cluster.dir / "jobs" / "whoami.sh"
    script.parent.mkdir(exist_ok=True)
    script.write_text(WHOAMI)
    try:
        jobs = [
            host_cluster.sh(
                "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
                "--chdir=/tmp", "-o", "/tmp/job-%j.out", str(script),
            ).strip().split(";")[0]
            for _ in "12"
        ]  # fmt: skip

        # Slurm's NodeAddr for each job's node, read while the job runs (or just ran)
        addr_of: dict[str, str] = {}

        def done() -> dict[str, tuple[str, ...]] | None:
            snap = c.reconciler.last_snapshot
            by_id = {j.job_id: j for j in snap.jobs} if snap else {}
            for j in by_id.values():
                if j.job_id in jobs and j.state is JobState.RUNNING:
                    for n in j.nodes:  # the address slurmctld sends the running job's work to
                        addr_of[n] = host_cluster.node_addr(n)
            if all(j in by_id and by_id[j].state is JobState.COMPLETED for j in jobs):
                return {j: by_id[j].nodes for j in jobs}
            return None

        ran_on = drive.until("both jobs to complete on burst nodes", done, 240)
        assert len({n for nodes in ran_on.values() for n in nodes}) == 2, ran_on

        # What each job printed, found on whichever host ran it: its own metadata's answer.
        printed: dict[str, tuple[str, str]] = {}
        for iid, h in vms.running.items():
            for j in jobs:
                out = h.exec("cat", f"/tmp/job-{j}.out")
                if out.returncode == 0:
                    said_iid, said_node = out.stdout.split()
                    printed[j] = (said_iid, said_node)
                    assert said_iid == iid  # the host it was on says so too
        assert set(printed) == set(jobs)
        ips = {
            i["InstanceId"]: i["PrivateIpAddress"]
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        }
        bound = {si.instance.node_name: si.instance.instance_id for si in c.store.instances()}
        for j, (iid, node) in printed.items():
            assert ran_on[j] == (node,)
            assert ips[iid] == addr_of[node], (j, iid, node, addr_of)
            assert bound[node] == iid
        assert len(vms.booted) == 2

        # Idle: drained by the controller, powered down by Slurm, terminated in moto, its host
        # halted and its namespace gone.
        def gone() -> bool:
            states = {si.instance.state for si in c.store.instances()}
            return states == {S.TERMINATED} and not vms.running

        drive.until("both instances to be terminated and their hosts gone", gone, 180)
        assert sorted(vms.stopped) == sorted(vms.booted)
        assert not [e for e in drive.errors if "nodeaddr" in e or "name " in e]
        left = hosts._run("ip", "netns", "list", check=False).stdout
        assert not [x for x in left.split() if x.startswith(f"{hosts.PREFIX}-h")]
    finally:
        vms.close()
