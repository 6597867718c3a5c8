"""The GPU agent on a burst VM that is a host of its own, installed the way the bootstrap
installs it: from a folder of wheels the policy names (`node.agent_wheels`), served on the
tests' /24 as a site's artifact store would serve it (this checkout's own wheel and the
agent's dependencies: there is no internet there). It runs on the image's own Python (3.11 on
Debian 12, 3.13 on Debian 13), as the node the VM joined as, with the token the node asked for
with its MUNGE proof, and reports the fake NVML (`PROVISIONER_AGENT_FAKE_GPUS=8`, which the
test image sets in /etc/default/gpu-burst-agent) as the node's GPUs.

With the shipped policy's rule (`require_nvml_idle: true`), the idle burst node is released
only on NVML's word: the same rule on-prem, now met by burst nodes in the field. Expected
values come from the VM (the GPUs its agent named after its own hostname), Slurm (the node's
states) and moto (the instance's end)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.bootstrap import ApiServer
from provisioner.domain.jobs import JobState
from provisioner.domain.plan import ReasonCode
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms, host_files, imds_sidecar, moto_lister
from tests.hosts.conftest import HostCluster, host_root
from tests.hosts.join_world import (
    REGION,
    Driver,
    S,
    ec2_client,
    job_state,
    make_controller,
    subnet_on_test_net,
)
from tests.hosts.test_spot_warning_aws import free_port

pytestmark = [pytest.mark.testhosts, pytest.mark.aws, pytest.mark.slurm, pytest.mark.e2e]


def test_the_vm_runs_the_agent_from_wheels_and_its_idle_gpus_let_the_node_go(
    host_cluster: HostCluster, moto_on_test_net: str, agent_wheels: str, tmp_path: Path, suite: str
) -> None:
    root = host_root(suite)
    ec2 = ec2_client(moto_on_test_net)
    port = free_port(hosts.HOST_ADDRESS)
    c = make_controller(
        host_cluster,
        moto_on_test_net,
        subnet_on_test_net(ec2),
        tmp_path,
        node={
            "controller_api": f"http://{hosts.HOST_ADDRESS}:{port}",
            "agent_wheels": agent_wheels,
            "agent_interval_s": 2.0,
        },
        munge_socket=host_cluster.munge_socket_here,
        guardrails={"require_nvml_idle": True},  # as the shipped policy says
    )
    api = ApiServer(c.app, hosts.HOST_ADDRESS, port)
    api.start()
    files = host_files(root, host_cluster.munge_socket, gpus=8)
    files["/etc/default/gpu-burst-agent"] = "PROVISIONER_AGENT_FAKE_GPUS=8\n"
    vms = CloudVms(
        root,
        tmp_path / "vms",
        moto_lister(ec2, c.policy.controller, TAG_CONTROLLER),
        imds_sidecar(sys.executable, moto_on_test_net, REGION),
        files=files,
    )
    drive = Driver(c, vms)
    try:
        job = host_cluster.sh(
            "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
            "--chdir=/tmp", "-o", "/dev/null", "--wrap", "sleep 1",
        ).strip().split(";")[0]  # fmt: skip

        drive.until("the job to complete", lambda: job_state(c, job) is JobState.COMPLETED, 300)
        (iid,) = vms.booted
        node = c.store.instance(iid).instance.node_name
        hostname = vms.running[iid].spec.hostname

        def reported() -> list[str]:
            (t,) = c.store.telemetry(node) or (None,)
            return sorted(g.uuid for g in t.gpus) if t is not None else []

        uuids = drive.until("the agent on the VM to report the node's GPUs", reported, 180)
        # eight GPUs, named by the agent on the VM after its own host name, as the node
        assert uuids == sorted(f"GPU-fake-{hostname}-{i}" for i in range(8)), uuids

        def ended() -> bool:
            rec = c.store.instance(iid)
            return rec is not None and rec.instance.state in (S.TERMINATING, S.TERMINATED)

        drive.until("the idle node to be released", ended, 120)
        # released for idleness (Slurm and NVML agreeing), not at its join timeout or so
        drained = c.store.decisions(reason=ReasonCode.SCALE_DOWN_IDLE.value)
        assert [d.decision.node for d in drained] == [node]
        # NVML's word was there when the node was drained: a sample of its 8 idle GPUs
        (t,) = c.store.telemetry(node)
        assert len(t.gpus) == 8 and all(g.util_pct == 0 for g in t.gpus)
        assert min(g.sampled_ts for g in t.gpus) > 0
        state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        assert state["State"]["Name"] in ("shutting-down", "terminated")
    finally:
        vms.close()
        api.stop()
        c.store.close()
