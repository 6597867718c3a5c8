"""A burst VM that cannot join, in the field's own shapes: each is ended at the join timeout (no
money past it), and the decision and the instance's history say why, in words read from the
VM's serial console (EC2 GetConsoleOutput: moto's answer is what the test host wrote there).

- a wrong munge key: the cluster's key is a fresh one, the VM holds the image's;
- slurmd never starts (a broken unit on the image);
- cloud-init user-data that fails (a site template whose runcmd names a missing interpreter);
- slurmctld unreachable from the burst subnet (its address answers nothing there).

The VM whose hostname is not its node name is no failure: test_join_aws.py asserts such VMs
join. A node whose GPUs differ from its declaration is in test_gres_mismatch_aws.py.
On Debian 12 (Slurm 22.05) hosts: the join program's words do not depend on the suite.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.bootstrap import Controller
from provisioner.testing import hosts
from provisioner.testing.cloud_vms import CloudVms, host_files, imds_sidecar, moto_lister
from provisioner.testing.moto_faults import FaultyMotoServer
from tests.hosts.conftest import HostCluster, fresh_key_cluster_of, host_root, start_host_cluster
from tests.hosts.join_world import (
    REGION,
    Driver,
    S,
    ec2_client,
    join_failure_decisions,
    make_controller,
    subnet_on_test_net,
)

pytestmark = [pytest.mark.testhosts, pytest.mark.aws, pytest.mark.slurm, pytest.mark.e2e]

JOIN_TIMEOUT_S = 50.0  # every VM here fails within ~30 s of booting; none would ever join
NOBODY = f"{hosts.SUBNET}.250"  # an address on the /24 that no host holds
BROKEN_UNIT = "/etc/systemd/system/slurmd.service.d/zz-broken.conf"
BROKEN = "[Service]\nExecStart=\nExecStart=/bin/sh -c 'echo slurmd: fatal: bad image; exit 1'\n"


@dataclass(frozen=True)
class Shape:
    expect: str  # what the reason must say
    files: dict[str, str]
    node: dict[str, object]
    user_data: Callable[[str], str] | None = None
    fresh_key: bool = False


SHAPES = {
    "wrong-munge-key": Shape("munge key rejected by slurmctld", {}, {}, fresh_key=True),
    "slurmd-never-starts": Shape("FAILED slurmd: slurmd did not start", {BROKEN_UNIT: BROKEN}, {}),
    "user-data-fails": Shape(
        "the join program never ran; cloud-init:",
        {},
        {},
        user_data=lambda text: text.replace("/usr/bin/python3", "/usr/bin/python3.missing"),
    ),
    "slurmctld-unreachable": Shape(
        f"FAILED slurmctld: slurmctld at {NOBODY}:", {}, {"controller_host": NOBODY}
    ),
}


@pytest.fixture(params=["bookworm"])
def suite(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=sorted(SHAPES))
def shape(request: pytest.FixtureRequest) -> tuple[str, Shape]:
    return str(request.param), SHAPES[str(request.param)]


@pytest.fixture
def cluster(
    shape: tuple[str, Shape], test_network: str, suite: str, tmp_path: Path
) -> Iterator[HostCluster]:
    if shape[1].fresh_key:
        for c, _key in fresh_key_cluster_of(suite, tmp_path):
            yield c
        return
    c = start_host_cluster(suite)
    try:
        yield c
    finally:
        c.down(keep_log=tmp_path / "slurmctld.log")


def test_a_vm_that_cannot_join_is_ended_at_its_timeout_with_the_reason_from_its_console(
    shape: tuple[str, Shape],
    cluster: HostCluster,
    moto_server_on_test_net: FaultyMotoServer,
    tmp_path: Path,
    suite: str,
) -> None:
    name, s = shape
    moto = moto_server_on_test_net
    root = host_root(suite)
    ec2 = ec2_client(moto.endpoint)
    c = make_controller(
        cluster,
        moto.endpoint,
        subnet_on_test_net(ec2),
        tmp_path,
        node=s.node,
        join_timeout_s=JOIN_TIMEOUT_S,
    )
    vms = CloudVms(
        root,
        tmp_path / "vms",
        moto_lister(ec2, c.policy.controller, TAG_CONTROLLER),
        imds_sidecar(sys.executable, moto.endpoint, REGION),
        files={**host_files(root, cluster.munge_socket, gpus=8), **s.files},
        user_data=s.user_data,
    )
    moto.serve_consoles(vms.console)
    drive = Driver(c, vms)
    try:
        cluster.sh(
            "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
            "--chdir=/tmp", "-o", "/dev/null", "--wrap", "true",
        )  # fmt: skip
        drive.until("the first instance to end", lambda: any_ended(c), JOIN_TIMEOUT_S + 120)
        first = next(si.instance for si in c.store.instances() if si.instance.state.terminal)

        # ended at its join timeout, neither before nor later: at the first pass past it
        deadline = first.launched_ts + JOIN_TIMEOUT_S
        ending = next(t for t in first.history if t.to_state in (S.TERMINATING, S.TERMINATED))
        assert deadline < ending.at_ts <= drive.first_pass_after(deadline), first.history

        # the reason, on the instance and on the decision
        assert s.expect in ending.reason, (name, ending.reason)
        decided = join_failure_decisions(c, first.instance_id)
        assert decided and s.expect in decided[0].decision.detail["why"], decided
        assert first.instance_id in vms.booted  # it did boot: the failure is its own
    finally:
        vms.close()
        moto.serve_consoles(None)


def any_ended(c: Controller) -> bool:
    """One instance ended (Slurm then asks for the node again: the next VM fails alike)."""
    return any(si.instance.state.terminal for si in c.store.instances())
