"""A VM whose hardware differs from its node's declaration, with no `config_overrides` on the
test hosts' clusters (as on a production cluster):

- fewer GPUs: the cluster's gres.conf names 8 device files, the VM has 4. slurmd waits for the
  missing ones, then gives up ("can't stat gres.conf file /dev/nvidia4"): the join program
  says so on the console, and the controller ends the VM at its join timeout with those words.
- less memory: the cluster declares 4 TiB per node. slurmd registers, and slurmctld drains the
  node with its own reason ("Low RealMemory ..."). The controller takes a node drained while it
  joins for a failed join: the VM is ended at once, not at the timeout.

Either way the decision and the instance's history say why. On Slurm 22.05 and 24.11.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.domain.instances import CloudInstance
from provisioner.testing.cloud_vms import CloudVms, host_files, imds_sidecar, moto_lister
from provisioner.testing.moto_faults import FaultyMotoServer
from tests.hosts.conftest import HostCluster, host_root, start_host_cluster
from tests.hosts.join_world import (
    REGION,
    Driver,
    S,
    ec2_client,
    join_failure_decisions,
    make_controller,
)
from tests.hosts.join_world import subnet_on_test_net as subnet_on

pytestmark = [pytest.mark.testhosts, pytest.mark.aws, pytest.mark.slurm, pytest.mark.e2e]

JOIN_TIMEOUT_S = 60.0  # slurmd gives up on a missing device file after 20 s
TIB_MB = 4 * 1024 * 1024
CASES = {
    # kind: (declared MiB per node, GPU device files on the VM, the reason's words)
    "fewer-gpus": (1000, 4, "can't stat gres.conf file /dev/nvidia4"),
    "less-memory": (TIB_MB, 8, "Low RealMemory (reported:"),
}


@pytest.fixture(params=sorted(CASES))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def cluster(kind: str, test_network: str, suite: str, tmp_path: Path) -> Iterator[HostCluster]:
    c = start_host_cluster(suite, node_mem_mb=CASES[kind][0])
    try:
        yield c
    finally:
        c.down(keep_log=tmp_path / "slurmctld.log")


def test_a_vm_unlike_its_declaration_is_ended_with_the_reason(
    kind: str,
    cluster: HostCluster,
    moto_server_on_test_net: FaultyMotoServer,
    tmp_path: Path,
    suite: str,
) -> None:
    _, gpus, words = CASES[kind]
    assert "config_overrides" not in cluster.sh("scontrol", "show", "config")
    moto = moto_server_on_test_net
    root = host_root(suite)
    ec2 = ec2_client(moto.endpoint)
    c = make_controller(
        cluster, moto.endpoint, subnet_on(ec2), tmp_path, join_timeout_s=JOIN_TIMEOUT_S
    )
    vms = CloudVms(
        root,
        tmp_path / "vms",
        moto_lister(ec2, c.policy.controller, TAG_CONTROLLER),
        imds_sidecar(sys.executable, moto.endpoint, REGION),
        files=host_files(root, cluster.munge_socket, gpus=gpus),
    )
    moto.serve_consoles(vms.console)
    drive = Driver(c, vms)
    try:
        cluster.sh(
            "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
            "--chdir=/tmp", "-o", "/dev/null", "--wrap", "true",
        )  # fmt: skip

        def first_ended() -> CloudInstance | None:
            done = [si.instance for si in c.store.instances() if si.instance.state.terminal]
            return done[0] if done else None

        first = drive.until("the instance to end", first_ended, JOIN_TIMEOUT_S + 120)
        ending = next(t for t in first.history if t.to_state in (S.TERMINATING, S.TERMINATED))
        assert words in ending.reason, ending.reason
        launched = first.history[0].at_ts
        if kind == "less-memory":
            assert f"slurm drained {first.node_name} as it joined" in ending.reason
            assert ending.at_ts - launched < JOIN_TIMEOUT_S / 2  # at once, not at the timeout
        else:
            assert "FAILED slurmd: slurmd did not start" in ending.reason
            deadline = first.launched_ts + JOIN_TIMEOUT_S  # ended at the first pass past it
            assert deadline < ending.at_ts <= drive.first_pass_after(deadline), first.history
        (d,) = join_failure_decisions(c, first.instance_id)
        assert words in d.decision.detail["why"]
    finally:
        vms.close()
        moto.serve_consoles(None)
