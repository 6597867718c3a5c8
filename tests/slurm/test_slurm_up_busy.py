"""Issue 16 item 8: re-running `make slurm-up` (scripts/slurm-up.sh) while the on-prem nodes are
busy with jobs succeeds at once; it used to wait 60 s for them to be idle and fail."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
from slurm_harness import REPO, Cluster

from provisioner.domain.nodes import NodeState

pytestmark = pytest.mark.slurm


def test_slurm_up_tolerates_busy_onprem_nodes(cluster: Cluster):
    for _ in range(2):  # one 4-GPU job per on-prem node
        cluster.sbatch("-p", "onprem", "--gres=gpu:a100:4", wrap="sleep 120")

    def busy(snap):
        onprem = [n for n in snap.nodes if n.name not in cluster.cloud_nodes]
        busy_states = (NodeState.ALLOCATED, NodeState.MIXED)
        return (onprem and all(n.state in busy_states for n in onprem)) or None

    cluster.wait("both on-prem nodes running a job", busy, timeout=90)
    t0 = time.monotonic()
    # the cluster's own series and ports, as `make slurm-up` starts it (never the defaults)
    conf = (cluster.dir / "etc" / "slurm.conf").read_text()
    port = re.search(r"^SlurmctldPort=(\d+)", conf, re.M)
    assert port, "no SlurmctldPort in slurm.conf"
    env = {**os.environ, "PORT_BASE": port.group(1)}
    if cluster.env.get("SLURM_SERIES"):
        env["SLURM_SERIES"] = cluster.env["SLURM_SERIES"]
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm-up.sh"), str(cluster.dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "READY" in proc.stdout
    assert time.monotonic() - t0 < 45
