"""The munge key reaches a GCE burst VM from Secret Manager, read as the VM's own service
account, never from user-data or the image: the test cluster's key is a fresh one, not the key
baked into the test-host root, so a node that joins proves it read the secret.

The GCE fake serves Secret Manager's `versions.access` with its IAM check
(provisioner/testing/fake_secret_manager.py); the VM's metadata stand-in hands out an access
token for the service account the instance runs as (from the pool's instance template), as
GCE's metadata server does.

- The pool's service account holds secretAccessor on the secret: the VM joins and runs the job.
- Another pool's account does not: Secret Manager answers 403, the VM gets no key and no node,
  and the controller ends the instance at its join timeout.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.config.models import PoolPolicy
from provisioner.domain.jobs import JobState
from provisioner.testing.cloud_vms import CloudVms, gce_lister, gce_metadata_sidecar, host_files
from provisioner.testing.fake_gce import FakeGCE
from tests.hosts.conftest import HostCluster, fresh_key_cluster_of, host_root
from tests.hosts.join_world import Driver, S, all_ended, job_state, make_controller

pytestmark = [pytest.mark.testhosts, pytest.mark.gcp, pytest.mark.slurm, pytest.mark.e2e]

PROJECT = "burst-proj"
SECRET = "munge-key"
READER = f"burst-node@{PROJECT}.iam.gserviceaccount.com"
IMAGE = "projects/debian-cloud/global/images/family/debian-12"


def pool(account: str) -> PoolPolicy:
    return PoolPolicy(
        name="cloud-gcp",
        cloud="gcp",
        regions=["us-central1"],
        gpu_model="A100",
        instance_types=["a2-highgpu-8g"],
        capacity="spot",
        max_nodes=1,
        boot_seconds=10,
        partition="cloud",
        service_account=account,
    )


@pytest.fixture
def fresh_key_cluster(
    test_network: str, suite: str, tmp_path: Path
) -> Iterator[tuple[HostCluster, bytes]]:
    yield from fresh_key_cluster_of(
        suite, tmp_path, prefix="cloud-gcp", features="cloud,gcp,us-central1,spot"
    )


@pytest.mark.parametrize("account", ["may-read", "may-not-read"])
def test_the_gce_vm_reads_its_munge_key_as_its_service_account_or_gets_no_node(
    fresh_key_cluster: tuple[HostCluster, bytes],
    gce_on_test_net: FakeGCE,
    tmp_path: Path,
    suite: str,
    account: str,
) -> None:
    from google.auth.credentials import AnonymousCredentials

    cluster, key = fresh_key_cluster
    fake = gce_on_test_net
    root = host_root(suite)
    assert (root / "etc" / "munge" / "munge.key").read_bytes() != key  # not the image's key
    fake.secret_manager.add_version(PROJECT, SECRET, key)
    fake.secret_manager.grant_access(PROJECT, SECRET, READER)
    runs_as = READER if account == "may-read" else f"other@{PROJECT}.iam.gserviceaccount.com"
    c = make_controller(
        cluster,
        None,
        "",
        tmp_path,
        pools=[pool(runs_as)],
        images={"gcp": IMAGE},
        gcp=(fake.endpoint, PROJECT, AnonymousCredentials()),
        node={
            "munge_key_secret": f"projects/{PROJECT}/secrets/{SECRET}",
            "secretmanager_endpoint": fake.endpoint,
        },
        # the VM that may not read its key never joins: this case is about that timeout
        **({"join_timeout_s": 60.0} if account == "may-not-read" else {}),
    )
    vms = CloudVms(
        root,
        tmp_path / "vms",
        gce_lister(fake, PROJECT),
        gce_metadata_sidecar(sys.executable, fake.endpoint, PROJECT),
        files=host_files(root, cluster.munge_socket, gpus=8),
    )
    drive = Driver(c, vms)
    try:
        job = cluster.sh(
            "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
            "--chdir=/tmp", "-o", "/dev/null", "--wrap", "true",
        ).strip().split(";")[0]  # fmt: skip

        if account == "may-read":
            drive.until("the job to complete", lambda: job_state(c, job) is JobState.COMPLETED, 300)
            (vm,) = vms.booted
            got = vms.running[vm].exec("sha256sum", "/etc/munge/munge.key").stdout.split()[0]
            assert got == hashlib.sha256(key).hexdigest()
            # the user-data names the secret, never holds the key
            (inst,) = fake.instances.values()
            items = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
            assert SECRET in items["user-data"]
            assert key.hex() not in items["user-data"]
            assert base64.b64encode(key).decode() not in items["user-data"]
        else:
            drive.until("the instance to end at its join timeout", lambda: all_ended(c), 180)
            assert job_state(c, job) is not JobState.COMPLETED
            reasons = [t.reason for si in c.store.instances() for t in si.instance.history]
            assert any("join" in r for r in reasons), reasons
            assert {si.instance.state for si in c.store.instances()} <= {S.TERMINATED, S.FAILED}
            # why it never joined, in its own words on its console: Secret Manager said no
            (vm,) = vms.booted
            said = vms.consoles[vm].read_text(errors="replace")
            assert "Secret Manager" in said and "PERMISSION_DENIED" in said, said[-2000:]
    finally:
        vms.close()
