"""What the end-to-end tests share: the real controller built against the live Slurm and moto's
server, a driver that runs its passes on the wall clock until a condition holds, and moto's
view of the controller's instances."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from slurm_harness import Cluster

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.bootstrap import Controller, build_clouds, build_controller, load_settings
from provisioner.clock import ManualClock
from provisioner.config import load_policy
from provisioner.store import Store

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies" / "demo" / "slurm"


def aws(endpoint: str, service: str):
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def moto_instances(endpoint: str, controller: str, states=("pending", "running")) -> list[dict]:
    res = aws(endpoint, "ec2").describe_instances(
        Filters=[
            {"Name": f"tag:{TAG_CONTROLLER}", "Values": [controller]},
            {"Name": "instance-state-name", "Values": list(states)},
        ]
    )
    return [i for r in res["Reservations"] for i in r["Instances"]]


def make(cluster: Cluster, moto, tmp_path: Path, clock: ManualClock) -> Controller:
    import boto3

    settings = load_settings(
        store_url=f"sqlite:///{tmp_path / 'controller.sqlite'}",
        policies=POLICIES,
        # 24.11: slurmrestd with JWT first, the CLI as fallback; 22.05: the CLI
        slurm_mode="rest" if cluster.env.get("SLURMRESTD_URL") else "cli",
        slurm_conf=cluster.env["SLURM_CONF"],
        state_dir=cluster.env["PROVISIONER_STATE_DIR"],
        launcher="same-host-stand-in",
        aws_endpoint_url=moto.endpoint,
        pool_driver="sdk",
        tick_s=0.5,
    )
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    policy = load_policy(POLICIES)
    return build_controller(
        settings,
        clock=clock,
        store=Store(settings.store_url),
        policy=policy,
        clouds=build_clouds(settings, policy, aws_session=session),
    )


class Driver:
    """Runs passes (the clock set to the wall clock first) until a condition holds."""

    def __init__(self, c: Controller, clock: ManualClock) -> None:
        self.c = c
        self.clock = clock
        self.reports: list = []

    def until(self, what: str, cond, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            self.clock.set(datetime.now(UTC))
            self.reports.append(self.c.reconciler.run_pass())
            got = cond()
            if got:
                return got
            if time.monotonic() > deadline:
                snap = self.c.reconciler.last_snapshot
                nodes = [(n.name, str(n.state)) for n in snap.nodes] if snap else []
                jobs = (
                    [
                        (j.job_id, str(j.state), j.partition, j.nodes, j.eligible_ts, j.held)
                        for j in snap.jobs
                    ]
                    if snap
                    else []
                )
                insts = [
                    (
                        si.instance.instance_id,
                        str(si.instance.state),
                        si.instance.node_name,
                        [(str(t.to_state), t.reason, round(t.at_ts)) for t in si.instance.history],
                    )
                    for si in self.c.store.instances()
                ]
                errors = [e for r in self.reports[-5:] for e in r.errors]
                pytest.fail(
                    f"timed out waiting for {what}: nodes={nodes} jobs={jobs} "
                    f"instances={insts} errors={errors}"
                )
            time.sleep(0.5)
