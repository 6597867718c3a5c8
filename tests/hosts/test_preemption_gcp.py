"""The GCE preemption, end to end, on a burst VM that is a host of its own.

The GCE fake preempts the VM: its metadata server stand-in answers `instance/preempted` TRUE,
and 30 s later the VM stops (its group would recreate it under the same name). The VM's own
watcher reads the flag and reports it to the controller, signed with munge; the controller
signals the job (its trap writes a checkpoint), requeues it in Slurm and deletes the VM
inside GCE's 30 seconds, so its group recreates nothing. Expected values come from the VM, from
Slurm's restart count and from the fake's own records. On Slurm 22.05 and 24.11.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from provisioner.bootstrap import ApiServer
from provisioner.domain.plan import ReasonCode
from provisioner.domain.spot_warnings import WarningKind
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms, gce_lister, gce_metadata_sidecar, host_files
from provisioner.testing.fake_gce import FakeGCE
from tests.hosts.conftest import HostCluster, host_root
from tests.hosts.join_world import Driver, S, make_controller
from tests.hosts.test_join_gcp import IMAGE, POOL, PROJECT
from tests.hosts.test_spot_warning_aws import (
    free_port,
    ready_vm_running,
    submit_checkpointing_job,
    telemetry,
)

pytestmark = [pytest.mark.testhosts, pytest.mark.gcp, pytest.mark.slurm, pytest.mark.e2e]


def test_a_preempted_gce_vm_has_its_job_requeued_after_a_checkpoint_and_is_deleted_in_time(
    gcp_cluster: HostCluster, gce_on_test_net: FakeGCE, tmp_path: Path, suite: str
) -> None:
    from google.auth.credentials import AnonymousCredentials

    root = host_root(suite)
    fake = gce_on_test_net
    port = free_port(hosts.HOST_ADDRESS)
    c = make_controller(
        gcp_cluster,
        None,
        "",
        tmp_path,
        pools=[POOL],
        images={"gcp": IMAGE},
        gcp=(fake.endpoint, PROJECT, AnonymousCredentials()),
        node={"controller_api": f"http://{hosts.HOST_ADDRESS}:{port}"},
        munge_socket=gcp_cluster.munge_socket_here,
    )
    api = ApiServer(c.app, hosts.HOST_ADDRESS, port)
    api.start()
    vms = CloudVms(
        root,
        tmp_path / "vms",
        gce_lister(fake, PROJECT),
        gce_metadata_sidecar(sys.executable, fake.endpoint, PROJECT),
        files=host_files(root, gcp_cluster.munge_socket, gpus=8),
    )
    drive = Driver(c, vms)
    try:
        jid = submit_checkpointing_job(gcp_cluster)
        name = drive.until("the job running on a GCE VM", lambda: ready_vm_running(c, jid), 300)
        ((zone, _),) = [k for k in fake.instances if k[1] == name]
        ip = fake.instances[(zone, name)]["networkInterfaces"][0]["networkIP"]
        first_id = fake.instances[(zone, name)]["id"]
        host = vms.running[str(first_id)]  # the hypervisor knows a GCE VM by its numeric id
        host.wait_for(f"started-{jid}", 60)  # the script itself runs on the VM
        # the GPU agent's token, asked for under the VM's name (what the controller knows a
        # GCE VM by), speaks for its node
        token = host.wait_inside("/etc/gpu-burst/agent.token", 120).strip()
        node = c.store.instance(name).instance.node_name
        assert telemetry(f"http://{hosts.HOST_ADDRESS}:{port}", token, node) == 202
        preempted = time.time()  # the fake's clock is the wall clock; the Driver sets the
        fake.preempt(zone, name)  # controller's to it each pass. The VM stops 30 s from now.

        def ended() -> bool:
            rec = c.store.instance(name)
            return rec is not None and rec.instance.state in (S.TERMINATING, S.TERMINATED)

        drive.until("the instance ended after the preemption", ended, 28)
        (warning,) = c.reconciler.deps.spot_inbox.held().get(name, ())
        assert (warning.kind, warning.source) == (WarningKind.PREEMPTION, ip)
        assert host.wait_for(f"checkpoint-{jid}", 10).strip() == "checkpoint"
        (d,) = c.store.decisions(reason=ReasonCode.SPOT_WARNING.value)
        assert d.decision.instance == name
        ending = next(
            t for t in c.store.instance(name).instance.history if t.to_state is S.TERMINATING
        )
        assert ending.at_ts < preempted + 30  # inside GCE's window
        show = gcp_cluster.sh("scontrol", "show", "job", jid)
        assert "Restarts=1" in show, show
        # deleted before GCE stopped it: its group has nothing to recreate under that name
        assert fake.take_due_preemptions() in ([], [name])
        assert all(
            i["id"] != first_id for (z, n), i in fake.instances.items() if n == name
        )  # that machine is gone
        assert fake.retired == []
    finally:
        vms.close()
        api.stop()
        c.store.close()
