"""Issue 16 item 7: with slurmctld unreachable, a pass's observation fails in well under a second
with the cause in words, instead of about 9 s of squeue retries saying only that squeue failed.
Real scontrol/squeue against a copy of the live cluster's slurm.conf whose SlurmctldPort has no
slurmctld behind it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from slurm_harness import Cluster

from provisioner.clock import SystemClock
from provisioner.command_runner import SubprocessRunner
from provisioner.domain.errors import SnapshotError
from provisioner.observe.slurm.observer import CliSlurmObserver

pytestmark = pytest.mark.slurm


def _unreachable_conf(cluster: Cluster, tmp_path: Path) -> str:
    text = Path(cluster.env["SLURM_CONF"]).read_text()
    with __import__("socket").socket() as s:  # a loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    conf = tmp_path / "slurm.conf"
    conf.write_text(re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={free}", text))
    return str(conf)


def test_ping_reports_slurmctld_unreachable_at_once(cluster: Cluster, tmp_path: Path):
    up = CliSlurmObserver(cluster.runner, SystemClock(), ping_timeout_s=5)
    assert up.observe().nodes  # the live cluster answers the ping and the reads

    runner = SubprocessRunner(slurm_conf=_unreachable_conf(cluster, tmp_path))
    fast = CliSlurmObserver(runner, SystemClock(), timeout_s=30, ping_timeout_s=5)
    t0 = time.monotonic()
    with pytest.raises(SnapshotError) as exc:
        fast.observe()
    took = time.monotonic() - t0
    assert "slurmctld unreachable" in str(exc.value) and "DOWN" in str(exc.value)

    slow = CliSlurmObserver(runner, SystemClock(), timeout_s=30)  # no ping: squeue retries
    t0 = time.monotonic()
    with pytest.raises(SnapshotError):
        slow.observe()
    without = time.monotonic() - t0
    assert took < 3.0 and took < without / 2, (took, without)
