"""The join on GCE, end to end, each VM a host of its own: the real controller (its GCE client
against the GCE fake on the tests' /24) and a real slurmctld there. Each VM the fake's managed
instance group runs boots from the `user-data` metadata item the fake recorded, asks its own
metadata server stand-in which node it is (the `slurm-node` item the controller set with
setMetadata), and joins. A job prints the numeric instance id its host's metadata gives: that
is the fake's instance whose networkIP is Slurm's NodeAddr for the job's node. On Slurm 22.05
(Debian 12) and 24.11 (Debian 13)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from provisioner.config.models import PoolPolicy
from provisioner.testing.cloud_vms import CloudVms, gce_lister, gce_metadata_sidecar, host_files
from provisioner.testing.fake_gce import FakeGCE
from tests.hosts.conftest import HostCluster, host_root
from tests.hosts.join_world import Driver, S, WhoamiJobs, make_controller

pytestmark = [pytest.mark.testhosts, pytest.mark.gcp, pytest.mark.slurm, pytest.mark.e2e]

PROJECT = "burst-proj"
IMAGE = "projects/debian-cloud/global/images/family/debian-12"
POOL = PoolPolicy(
    name="cloud-gcp",
    cloud="gcp",
    regions=["us-central1"],
    gpu_model="A100",
    instance_types=["a2-highgpu-8g"],
    capacity="spot",
    max_nodes=2,
    boot_seconds=10,
    partition="cloud",
)
WHOAMI = """#!/bin/sh
python3 - <<'EOF'
import os, urllib.request as u
req = u.Request("http://169.254.169.254/computeMetadata/v1/instance/id",
                headers={"Metadata-Flavor": "Google"})
print(u.urlopen(req).read().decode(), os.environ["SLURMD_NODENAME"])
EOF
"""


def test_two_gce_vms_join_as_their_own_nodes_run_jobs_and_leave(
    gcp_cluster: HostCluster, gce_on_test_net: FakeGCE, tmp_path: Path, suite: str
) -> None:
    from google.auth.credentials import AnonymousCredentials

    root = host_root(suite)
    fake = gce_on_test_net
    c = make_controller(
        gcp_cluster,
        None,
        "",
        tmp_path,
        pools=[POOL],
        images={"gcp": IMAGE},
        gcp=(fake.endpoint, PROJECT, AnonymousCredentials()),
    )
    vms = CloudVms(
        root,
        tmp_path / "vms",
        gce_lister(fake, PROJECT),
        gce_metadata_sidecar(sys.executable, fake.endpoint, PROJECT),
        files=host_files(root, gcp_cluster.munge_socket, gpus=8),
        newest_first=True,
    )
    drive = Driver(c, vms)
    try:
        watch = WhoamiJobs(c, gcp_cluster, WHOAMI)
        jobs, addr_of = watch.ids, watch.addr_of
        ran_on = drive.until("both jobs to complete on GCE burst nodes", watch.done, 300)
        printed = {}
        for h in vms.running.values():
            for j in jobs:
                out = h.exec("cat", f"/tmp/job-{j}.out")
                if out.returncode == 0:
                    printed[j] = tuple(out.stdout.split())
        assert set(printed) == set(jobs)
        # the fake's own records: numeric id -> (name, networkIP)
        recs = {
            str(i["id"]): (name, i["networkInterfaces"][0]["networkIP"])
            for (_, name), i in list(fake.instances.items())
        }
        bound = {si.instance.node_name: si.instance.instance_id for si in c.store.instances()}
        for j, (gce_id, node) in printed.items():
            name, ip = recs[gce_id]
            assert ran_on[j] == (node,)
            assert ip == addr_of[node], (j, gce_id, node, addr_of)
            assert bound[node] == name  # the controller's instance id on GCE is the name
        assert len({n for nodes in ran_on.values() for n in nodes}) == 2

        def gone() -> bool:
            states = {si.instance.state for si in c.store.instances()}
            return states == {S.TERMINATED} and not vms.running

        drive.until("both GCE instances to be deleted and their hosts gone", gone, 180)
        assert sorted(vms.stopped) == sorted(vms.booted)
    finally:
        vms.close()
