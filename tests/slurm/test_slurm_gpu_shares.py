"""Issue 32: parts of GPUs as the real daemons state them, on Slurm 22.05 and 24.11.

Each release gets a cluster of its own (ports no other cluster uses: 7417 and 7517) whose on-prem
nodes carry 2 whole A100s, 7 MIG devices of type 1g.10gb (one GPU's slices) and 8 shards over the
whole GPUs, on fake device files (scripts/slurm-up.sh ONPREM_MIG, ONPREM_SHARDS; docs/slurm.md).
Jobs asking for MIG devices and shards run and wait there; the controller's readers (squeue and
sinfo/scontrol, and slurmrestd) must see them as parts of GPUs, not whole GPUs, and count each
node's physical GPUs, not its slices."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_harness import REPO, load_env_sh

from provisioner.clock import SystemClock
from provisioner.command_runner import SubprocessRunner
from provisioner.domain.errors import SnapshotError
from provisioner.domain.gpu_share import ShareRequest
from provisioner.domain.jobs import JobState
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm.observer import CliSlurmObserver, RestSlurmObserver, RestToken

PORTS = {"22.05": 7417, "24.11": 7517}
SLURM_ROOT = Path(os.environ.get("SLURM_ROOT") or REPO / ".slurm-roots" / "trixie")


def _env(series: str) -> dict[str, str]:
    drop = ("SLURM", "PROVISIONER_", "PG_", "PORT_BASE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env |= {
        "SLURM_SERIES": series,
        "PORT_BASE": str(PORTS[series]),
        "ONPREM_GPUS": "2",
        "ONPREM_MIG": "1g.10gb:7",
        "ONPREM_SHARDS": "8",
        "N_CLOUD": "1",
        # GPU classes as features, which a job's constraint may choose among
        "ONPREM_FEATURES": "onprem,a100,1g.10gb",
        "CLOUD_FEATURES": "cloud,aws,us-east-1,spot,t4",
    }
    if series == "24.11":
        env["SLURM_ROOT"] = str(SLURM_ROOT)
    return env


class SharesCluster:
    def __init__(self, series: str, sdir: Path) -> None:
        self.series = series
        self.dir = sdir
        self.env = load_env_sh(sdir / "env.sh")
        bin_dir = self.env.get("SLURM_BIN_DIR") or None
        self.runner = SubprocessRunner(slurm_conf=self.env["SLURM_CONF"], bin_dir=bin_dir)
        self.cli = CliSlurmObserver(self.runner, SystemClock(), timeout_s=15)
        if self.env.get("SLURMRESTD_URL"):
            token = RestToken(
                file=self.env["SLURMRESTD_TOKEN_FILE"], user=self.env.get("SLURMRESTD_USER")
            )
            self.rest = RestSlurmObserver(
                None,
                SystemClock(),
                base_url=self.env["SLURMRESTD_URL"],
                token=token,
                api_version=None,
            )
        else:
            self.rest = RestSlurmObserver(self.env["SLURMRESTD_SOCKET"], SystemClock())

    def sbatch(self, *args: str) -> str:
        res = self.runner.run(
            [
                "sbatch",
                "--parsable",
                "-p",
                "onprem",
                "-o",
                "/dev/null",
                *args,
                "--wrap",
                "sleep 600",
            ],
            timeout_s=20,
        )
        assert res.ok, res.describe()
        return res.stdout.strip().split(";")[0]

    def observe(self, observer: CliSlurmObserver | RestSlurmObserver) -> ClusterSnapshot:
        deadline = time.monotonic() + 30
        while True:
            try:
                return observer.observe()
            except SnapshotError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.3)


@pytest.fixture(scope="module", params=sorted(PORTS))
def shares_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SharesCluster]:
    series = request.param
    sdir = tmp_path_factory.mktemp(f"slurm-shares-{series}") / "cluster"
    env = _env(series)
    script = REPO / "scripts"
    try:
        up = subprocess.run(
            ["bash", str(script / "slurm-up.sh"), str(sdir)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert up.returncode == 0, f"slurm-up.sh ({series}):\n{up.stdout}\n{up.stderr}"
        yield SharesCluster(series, sdir)
    finally:
        subprocess.run(
            ["bash", str(script / "slurm-down.sh"), str(sdir), "--purge"],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )


@pytest.mark.slurm
def test_mig_and_shard_jobs_are_parts_of_gpus_on_nodes_counted_by_physical_gpus(
    shares_cluster: SharesCluster,
) -> None:
    c = shares_cluster
    mig = c.sbatch("--gres=gpu:1g.10gb:2")
    shard = c.sbatch("--gres=shard:3")
    mig_held = c.sbatch("-H", "-N2", "--gres=gpu:1g.10gb:1")
    shard_held = c.sbatch("-H", "--gres=shard:2")
    whole = c.sbatch("-H", "--gres=gpu:a100:1")
    # untyped GPUs with a choice of classes naming a MIG profile: a device of it, or a T4
    choice = c.sbatch("-H", "--gres=gpu:1", "--constraint=1g.10gb|t4")

    def running(snap: ClusterSnapshot) -> bool:
        states = {j.job_id: j.state for j in snap.jobs}
        return states.get(mig) is JobState.RUNNING and states.get(shard) is JobState.RUNNING

    deadline = time.monotonic() + 60
    snap = c.observe(c.cli)
    while not running(snap):
        assert time.monotonic() < deadline, (
            f"jobs did not start: {[(j.job_id, j.state) for j in snap.jobs]}"
        )
        time.sleep(0.3)
        snap = c.observe(c.cli)

    for source, s in (("cli", snap), ("rest", c.observe(c.rest))):
        jobs = {j.job_id: j for j in s.jobs}
        assert jobs[mig].gpus == 0 and jobs[mig].share == ShareRequest("mig", 2, "1g.10gb"), source
        assert jobs[shard].gpus == 0 and jobs[shard].share == ShareRequest("shard", 3), source
        # -N2 with one device per node: two devices in all
        assert jobs[mig_held].share == ShareRequest("mig", 2, "1g.10gb"), source
        assert jobs[shard_held].share == ShareRequest("shard", 2), source
        assert jobs[whole].gpus == 1 and jobs[whole].share is None, source
        assert jobs[choice].gpus == 0, source
        assert jobs[choice].share == ShareRequest("mig", 1, "1g.10gb", ("t4",)), source

        onprem = [n for n in s.nodes if n.name.startswith("onprem-")]
        assert len(onprem) == 2, source
        for n in onprem:
            assert n.shares is not None, (source, n.name)
            # 2 whole GPUs, and 7 one-slice devices cut from a third
            assert (n.gpus, n.physical_gpus, n.shares.shards) == (2, 3, 8), (source, n.name)
            assert n.gpus_alloc == 0, (source, n.name)
        assert sum(n.shares.mig_free["1g.10gb"] for n in onprem if n.shares) == 14 - 2, source
        used = [n.shares.shards_used for n in onprem if n.shares]
        if c.series == "22.05":
            # 22.05 says how many GPUs have shards in use (1), not how many shards: unknown
            assert None in used and 0 in used, (source, used)
        else:
            assert sorted(used, key=lambda u: u or 0) == [0, 3], (source, used)
            assert {n.shares.shards_per_gpu for n in onprem if n.shares} == {4}, source

    job_lines = c.runner.run(["scontrol", "-o", "show", "job", mig], timeout_s=20).stdout
    assert re.search(r"TresPerNode=gres[:/]gpu:1g\.10gb:2", job_lines), job_lines
