"""Issue 16 item 6: `provisioner doctor` against the live local Slurm (scripts/slurm-up.sh) and
moto's server reports every check; with a misspelt partition in a pool it fails naming it, and
`provisioner run` refuses to start with one clear error before any instance exists."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_harness import Cluster

from provisioner.act.ports import TAG_CONTROLLER

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies" / "demo" / "slurm"


def env_for(cluster: Cluster, moto, tmp_path: Path, policies: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVISIONER_")}
    env.update(
        {
            "SLURM_CONF": cluster.env["SLURM_CONF"],
            # 24.11 runs in its root: its own commands (the host's 22.05 ones can't talk to it)
            "PROVISIONER_SLURM_BIN_DIR": cluster.env.get("PROVISIONER_SLURM_BIN_DIR", ""),
            "PROVISIONER_POLICIES": str(policies),
            "PROVISIONER_SLURM_MODE": "cli",
            "PROVISIONER_STORE_URL": f"sqlite:///{tmp_path / 'ctl.sqlite'}",
            "PROVISIONER_POOL_DRIVER": "sdk",
            "PROVISIONER_API_PORT": "0",
            "PROVISIONER_TICK_S": "0.5",
            "AWS_ENDPOINT_URL": moto.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provisioner.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        check=False,
    )


def owned_instances(endpoint: str) -> list[dict]:
    import boto3

    ec2 = boto3.client(
        "ec2",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    res = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_CONTROLLER}", "Values": ["*"]}])
    return [i for r in res["Reservations"] for i in r["Instances"]]


def test_doctor_reports_every_check_on_the_live_cluster(cluster: Cluster, moto, tmp_path):
    r = cli(env_for(cluster, moto, tmp_path, POLICIES), "doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    names = [line.split(":", 1)[0].split(None, 1)[1] for line in lines]
    for expected in (
        "slurm",
        "pool cloud-aws",
        "slurm power-saving hooks",
        "cloud aws",
        "catalog for pool cloud-aws",
        "budgets",
        "store",
        "api port",
    ):
        assert expected in names, r.stdout
    assert cluster.series in lines[0]  # the live cluster's own release
    assert not any(line.startswith("FAIL") for line in lines), r.stdout


def test_misspelt_partition_stops_the_start_before_any_instance(cluster: Cluster, moto, tmp_path):
    bad = tmp_path / "policies"
    shutil.copytree(POLICIES, bad)
    pools = bad / "pools.yaml"
    pools.write_text(pools.read_text().replace("partition: cloud", "partition: clod"))
    env = env_for(cluster, moto, tmp_path, bad)

    doc = cli(env, "doctor")
    assert doc.returncode == 1
    assert "FAIL  pool cloud-aws: partition 'clod' does not exist" in doc.stdout

    # A job that would burst at once, so a start that went ahead would buy an instance.
    cluster.sbatch("-p", "onprem,cloud", "--gres=gpu:a100:8", wrap="sleep 30")
    run = cli(env, "run", "--passes", "3")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "preflight failed" in run.stderr and "'clod'" in run.stderr
    assert "Traceback" not in run.stderr
    assert owned_instances(moto.endpoint) == []
