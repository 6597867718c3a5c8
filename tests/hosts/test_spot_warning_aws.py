"""The spot warning, end to end, on a burst VM that is a host of its own.

moto's stand-in gives the instance EC2's two-minute interruption notice. Nothing else tells
the controller: the VM's own watcher (infra/bootstrap/gpu-burst-watch.py, installed by the
user-data) reads the notice from its metadata stand-in, signs a report with `munge` (the
cluster's key, which the image holds) and POSTs it to the controller's API over the tests'
/24. The controller decodes it with the cluster's munged, signals the job (USR1: the job's own
trap writes its checkpoint), requeues it in Slurm and ends the instance, all before EC2 would
have taken it. Expected values come from the VM (the checkpoint its job wrote), Slurm (the
job's restart count) and moto (the instance's state, the notice's time).

On Slurm 22.05 (Debian 12 hosts) and 24.11 (Debian 13 hosts).
"""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.bootstrap import ApiServer, Controller
from provisioner.domain.plan import ReasonCode
from provisioner.domain.spot_warnings import WarningKind
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms, host_files, imds_sidecar, moto_lister
from tests.hosts.conftest import HostCluster, host_root
from tests.hosts.join_world import (
    REGION,
    Driver,
    S,
    ec2_client,
    make_controller,
    subnet_on_test_net,
)

pytestmark = [pytest.mark.testhosts, pytest.mark.aws, pytest.mark.slurm, pytest.mark.e2e]

# The job checkpoints on USR1 into the host's report folder, then keeps working.
JOB = """#!/bin/sh
trap 'echo checkpoint > /mnt/out/checkpoint-$SLURM_JOB_ID' USR1
echo started > /mnt/out/started-$SLURM_JOB_ID
while :; do sleep 1; done
"""


def submit_checkpointing_job(cluster: HostCluster) -> str:
    """An 8-GPU, requeueable job in the cloud partition running JOB; its id."""
    script = cluster.dir / "jobs" / "checkpointing.sh"
    script.parent.mkdir(exist_ok=True)
    script.write_text(JOB)
    return cluster.sh(
        "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "10", "--requeue",
        "--chdir=/tmp", "-o", "/tmp/job-%j.out", str(script),
    ).strip().split(";")[0]  # fmt: skip


def ready_vm_running(c: Controller, jid: str) -> str | None:
    """The id of the ready instance whose node runs job `jid` (None while there is none)."""
    snap = c.reconciler.last_snapshot
    job = next((j for j in snap.jobs if j.job_id == jid), None) if snap else None
    if job is None or str(job.state) != "running" or not job.nodes:
        return None
    live = {si.instance.node_name: si.instance for si in c.store.instances(live_only=True)}
    inst = live.get(job.nodes[0])
    return inst.instance_id if inst is not None and inst.state is S.READY else None


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def test_a_spot_notice_on_the_vm_requeues_its_job_after_a_checkpoint_and_ends_the_instance(
    host_cluster: HostCluster, moto_on_test_net: str, tmp_path: Path, suite: str
) -> None:
    root = host_root(suite)
    ec2 = ec2_client(moto_on_test_net)
    port = free_port(hosts.HOST_ADDRESS)
    c = make_controller(
        host_cluster,
        moto_on_test_net,
        subnet_on_test_net(ec2),
        tmp_path,
        node={"controller_api": f"http://{hosts.HOST_ADDRESS}:{port}"},
        munge_socket=host_cluster.munge_socket_here,
    )
    api = ApiServer(c.app, hosts.HOST_ADDRESS, port)
    api.start()
    vms = CloudVms(
        root,
        tmp_path / "vms",
        moto_lister(ec2, c.policy.controller, TAG_CONTROLLER),
        imds_sidecar(sys.executable, moto_on_test_net, REGION),
        files=host_files(root, host_cluster.munge_socket, gpus=8),
    )
    drive = Driver(c, vms)
    try:
        jid = submit_checkpointing_job(host_cluster)
        iid = drive.until("the job running on a burst VM", lambda: ready_vm_running(c, jid), 300)
        host = vms.running[iid]
        host.wait_for(f"started-{jid}", 60)  # the script itself runs on the VM (not configuring)
        # the join program got the GPU agent's token for its node's own MUNGE proof: it
        # speaks for that node, and for no other
        token = host.wait_inside("/etc/gpu-burst/agent.token", 120).strip()
        node = c.store.instance(iid).instance.node_name
        api_url = f"http://{hosts.HOST_ADDRESS}:{port}"
        assert telemetry(api_url, token, node) == 202
        assert telemetry(api_url, token, "cloud-aws-2" if node != "cloud-aws-2" else "x") == 403
        ip = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0][
            "PrivateIpAddress"
        ]
        notice = _warn(moto_on_test_net, iid)

        def ended() -> bool:
            rec = c.store.instance(iid)
            return rec is not None and rec.instance.state in (S.TERMINATING, S.TERMINATED)

        drive.until("the instance ended after the notice", ended, 110)
        # the watcher's report, as the controller took it: from the VM's own address
        (warning,) = [w for w in c.reconciler.deps.spot_inbox.held().get(iid, ())]
        assert (warning.kind, warning.node, warning.source) == (
            WarningKind.INTERRUPTION,
            c.store.instance(iid).instance.node_name,
            ip,
        )
        assert warning.action_ts == notice + 120  # the notice's own time, from the VM
        # the job checkpointed on the VM before Slurm requeued it
        assert host.wait_for(f"checkpoint-{jid}", 10).strip() == "checkpoint"
        (d,) = c.store.decisions(reason=ReasonCode.SPOT_WARNING.value)
        assert d.decision.instance == iid
        ending = next(
            t for t in c.store.instance(iid).instance.history if t.to_state is S.TERMINATING
        )
        assert ending.at_ts <= notice + 120 - c.policy.interruptions.margin_s
        show = host_cluster.sh("scontrol", "show", "job", jid)
        assert "Restarts=1" in show, show  # requeued once, not lost
        state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        assert state["State"]["Name"] in ("shutting-down", "terminated")

        def closed() -> bool:
            rec = c.store.instance(iid)
            return rec is not None and rec.instance.state.terminal

        drive.until("the instance's record to close", closed, 120)
        assert telemetry(api_url, token, node) == 401  # the token ended with its instance
    finally:
        vms.close()
        api.stop()
        c.store.close()


def telemetry(api: str, token: str, node: str) -> int:
    """The status `POST /v1/telemetry` answers a one-GPU sample for `node` sent with `token`."""
    body = {"node": node, "sampled_ts": time.time(), "gpus": [{"index": 0, "util_pct": 50.0}]}
    req = urllib.request.Request(
        f"{api}/v1/telemetry",
        json.dumps(body).encode(),
        {"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # the tests' /24 only
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _warn(endpoint: str, iid: str) -> float:
    """EC2's interruption notice for `iid`, given now on moto's clock; the notice's time."""
    req = urllib.request.Request(
        f"{endpoint}/_spot",
        json.dumps({"instance_id": iid, "region": REGION}).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:  # the tests' /24 only
        action = json.loads(resp.read())["instance_action"]
    return datetime.fromisoformat(action["time"].replace("Z", "+00:00")).timestamp() - 120
