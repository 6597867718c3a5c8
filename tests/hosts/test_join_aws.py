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
from pathlib import Path

import pytest

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms, host_files, imds_sidecar, moto_lister
from tests.hosts.conftest import HostCluster, host_root
from tests.hosts.join_world import (
    REGION,
    WHOAMI,
    Driver,
    S,
    WhoamiJobs,
    ec2_client,
    make_controller,
    subnet_on_test_net,
)

pytestmark = [pytest.mark.testhosts, pytest.mark.aws, pytest.mark.slurm, pytest.mark.e2e]


@pytest.mark.parametrize("order", ["launch-order", "reversed"])
def test_two_vms_join_as_their_own_nodes_run_jobs_and_leave(
    host_cluster: HostCluster, moto_on_test_net: str, tmp_path: Path, suite: str, order: str
) -> None:
    root = host_root(suite)
    ec2 = ec2_client(moto_on_test_net)
    subnet = subnet_on_test_net(ec2)
    c = make_controller(host_cluster, moto_on_test_net, subnet, tmp_path)
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
    try:
        watch = WhoamiJobs(c, host_cluster, WHOAMI)
        jobs, addr_of = watch.ids, watch.addr_of
        ran_on = drive.until("both jobs to complete on burst nodes", watch.done, 300)
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
                    # its hostname is the cloud's (ip-10-77-0-N), not its node's: no matter
                    assert h.exec("hostname").stdout.strip() != said_node
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
