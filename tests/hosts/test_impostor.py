"""A second machine claims a node that is already bound: it holds the munge key (the image's)
and starts `slurmd -N <that node> --conf-server ...`, as any VM holding the key could.

Measured here:
- Slurm 22.05 with NodeAddr set by the controller (no `cloud_reg_addrs`, the controller's
  mode): slurmctld keeps sending the node's work to its own instance. NodeAddr does not move,
  the job finishes where it started, and there is nothing to alert on.
- Slurm 22.05 with `cloud_reg_addrs` (the mode not chosen), and Slurm 24.11 in either mode:
  slurmctld moves NodeAddr to the impostor (24.11 logs nothing about it: it calls
  `cloud_reg_addrs` defunct and always takes the address from the registration). On its next
  pass the controller sees the node answering away from its instance: it drains the node,
  records a `node_address_mismatch` alert naming both addresses, and the instance ends as a
  drained one does. So on 24.11 the per-pass check, not the address set beforehand, is what holds.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.domain.jobs import JobState
from provisioner.domain.nodes import NodeState
from provisioner.domain.plan import ReasonCode
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms, host_files, imds_sidecar, moto_lister
from tests.hosts.conftest import HostCluster, host_root, start_host_cluster
from tests.hosts.join_world import REGION, Driver, ec2_client, make_controller, subnet_on_test_net

pytestmark = [pytest.mark.testhosts, pytest.mark.aws, pytest.mark.slurm, pytest.mark.e2e]

IMPOSTOR_OCTET = 200  # outside what moto gives this test's two or so instances


@pytest.fixture(params=["set-by-controller", "cloud_reg_addrs"])
def mode_cluster(
    request: pytest.FixtureRequest, test_network: str, suite: str, tmp_path: Path
) -> Iterator[tuple[str, HostCluster]]:
    cluster = start_host_cluster(suite, cloud_reg_addrs=request.param == "cloud_reg_addrs")
    try:
        yield str(request.param), cluster
    finally:
        cluster.down(keep_log=tmp_path / "slurmctld.log")


def test_a_second_machine_claiming_a_bound_node_draws_no_work_or_is_drained_with_an_alert(
    mode_cluster: tuple[str, HostCluster], moto_on_test_net: str, tmp_path: Path, suite: str
) -> None:
    mode, cluster = mode_cluster
    root = host_root(suite)
    ec2 = ec2_client(moto_on_test_net)
    c = make_controller(cluster, moto_on_test_net, subnet_on_test_net(ec2), tmp_path)
    files = host_files(root, cluster.munge_socket, gpus=8)
    vms = CloudVms(
        root,
        tmp_path / "vms",
        moto_lister(ec2, c.policy.controller, TAG_CONTROLLER),
        imds_sidecar(sys.executable, moto_on_test_net, REGION),
        files=files,
    )
    drive = Driver(c, vms)
    impostor = hosts.TestHost(
        hosts.HostSpec("i-impostor", "impostor", IMPOSTOR_OCTET, "#cloud-config\n{}\n"),
        root,
        tmp_path / "impostor",
        files=files,
    )
    try:
        job = cluster.sh(
            "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
            "--chdir=/tmp", "-o", "/dev/null", "--wrap", "sleep 25",
        ).strip().split(";")[0]  # fmt: skip

        def running() -> str | None:
            """The job's node, once it joined (a job Slurm gave a powering-up node shows as
            running before the node is there)."""
            snap = c.reconciler.last_snapshot
            j = next((j for j in snap.jobs if j.job_id == job), None) if snap else None
            if j is None or j.state is not JobState.RUNNING:
                return None
            n = next(n for n in snap.nodes if n.name == j.nodes[0])
            return n.name if n.state in (NodeState.ALLOCATED, NodeState.MIXED) else None

        node = drive.until("the job to run on a burst VM", running, 300)
        (si,) = c.store.instances()
        own_ip = next(
            i["PrivateIpAddress"]
            for r in ec2.describe_instances(InstanceIds=[si.instance.instance_id])["Reservations"]
            for i in r["Instances"]
        )
        assert cluster.node_addr(node) == own_ip

        impostor.boot()
        impostor.wait_systemd(60)
        conf = f"--conf-server {hosts.HOST_ADDRESS}:{cluster.port} -N {node}"
        started = impostor.exec(
            "sh",
            "-c",
            f"echo 'SLURMD_OPTIONS=\"{conf}\"' > /etc/default/slurmd && "
            "mkdir -p /etc/systemd/system/slurmd.service.d && "
            "printf '[Unit]\\nConditionPathExists=\\n' "
            "> /etc/systemd/system/slurmd.service.d/configless.conf && "
            "systemctl daemon-reload && systemctl start munge slurmd",
            timeout=60,
        )
        assert started.returncode == 0, started.stderr
        impostor_ip = impostor.spec.address

        def alerts() -> list[dict[str, str]]:
            found = c.store.decisions(reason=ReasonCode.NODE_ADDRESS_MISMATCH.value)
            return [{"node": d.decision.node, **d.decision.detail} for d in found]

        if mode == "cloud_reg_addrs" or cluster.series == "24.11":
            # slurmctld takes the impostor's address; the controller drains the node and alerts
            drive.until("the mismatch to be alerted", alerts, 60)
            (alert,) = alerts()
            assert alert == {
                "node": node,
                "expected": own_ip,
                "found": impostor_ip,
                "alert": "true",
            }

            def drained() -> bool:
                snap = c.reconciler.last_snapshot
                n = next(n for n in snap.nodes if n.name == node) if snap else None
                return n is not None and n.state in (
                    NodeState.DRAINING,
                    NodeState.DRAINED,
                    NodeState.POWERING_DOWN,
                    NodeState.POWERED_DOWN,
                )

            drive.until("the node to be drained", drained, 30)
            # drained as any idle node: its instance ends (the job went where slurmctld sent it)
            drive.until(
                "its instance to end",
                lambda: c.store.instance(si.instance.instance_id).instance.state.terminal,
                90,
            )
        else:
            # the impostor registered (slurmctld heard it), yet the work stays with the instance

            def done() -> bool:
                snap = c.reconciler.last_snapshot
                j = next((j for j in snap.jobs if j.job_id == job), None) if snap else None
                assert cluster.node_addr(node) == own_ip
                return j is not None and j.state is JobState.COMPLETED

            drive.until("the job to finish on its own instance", done, 90)
            assert alerts() == []
    finally:
        impostor.stop()
        vms.close()
