"""End to end: the real controller against the real local Slurm (scripts/slurm-up.sh) and moto's
server as AWS. Only the cloud VM's boot is played, by the local launcher starting a real slurmd
for the node an instance is bound to.

Jobs beyond on-prem capacity -> the loop bursts (an auto scaling group in moto, tagged instance)
-> Slurm powers up a CLOUD node for the jobs, the controller binds the instance to it and the
launcher starts its slurmd -> the jobs complete there -> the node idles -> the controller drains
it (power_down_asap) -> Slurm powers it down -> the instance is terminated in moto. The ledger,
`/v1/costs` and price x billed time agree within a cent; the run's FOCUS export passes
focus-validator.

The controller's clock is a ManualClock set to the wall clock before each pass: Slurm's job times
are wall times, and a pass reads one `now`. Real daemons need wall time, so the test polls them
with deadlines.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from e2e_harness import Driver, aws, make, moto_instances
from focus_check import require_validator, validate_focus, validator_site
from slurm_harness import Cluster

from provisioner.account.billing import billed_seconds, billing_start
from provisioner.api.auth import create_token
from provisioner.clock import ManualClock
from provisioner.domain.instances import InstanceState
from provisioner.domain.jobs import JobState
from provisioner.domain.money import cost_for_seconds
from provisioner.observe.slurm.observer import FallbackSlurmObserver

pytestmark = pytest.mark.e2e
S = InstanceState


def test_burst_to_moto_runs_jobs_on_cloud_nodes_then_scales_down_and_bills(
    cluster: Cluster, moto, tmp_path
):
    clock = ManualClock(datetime.now(UTC))
    c = make(cluster, moto, tmp_path, clock)
    ctl = c.policy.controller
    drive = Driver(c, clock)
    fill = [
        cluster.sbatch("-p", "onprem", "--gres=gpu:4", "-t", "10", "-J", "fill", wrap="sleep 300")
        for _ in "12"
    ]
    drive.until(
        "on-prem full",
        lambda: all(
            any(
                j.job_id == f and j.state is JobState.RUNNING
                for j in c.reconciler.last_snapshot.jobs
            )
            for f in fill
        ),
        30,
    )
    burst = [
        cluster.sbatch("-p", "onprem", "--gres=gpu:4", "-t", "2", "-J", "burst", wrap="sleep 6")
        for _ in "12"
    ]

    # 1. the loop bursts one 8-GPU node for both 4-GPU jobs; moto runs it, tagged
    drive.until("a scale-up", lambda: c.store.instances(), 30)
    (si,) = c.store.instances()
    inst = si.instance
    (vm,) = moto_instances(moto.endpoint, ctl)
    tags = {t["Key"]: t["Value"] for t in vm["Tags"]}
    assert vm["InstanceId"] == inst.instance_id and vm["InstanceType"] == "p4d.24xlarge"
    assert tags["pool"] == "cloud-aws" and tags["controller"] == ctl and tags["decision"]

    # 2. Slurm powers a CLOUD node up for the jobs, the instance is bound to it, the launcher
    #    starts its slurmd, the jobs run there and complete
    def done():
        snap = c.reconciler.last_snapshot
        jobs = {j.job_id: j for j in snap.jobs}
        return all(b in jobs and jobs[b].state is JobState.COMPLETED for b in burst) and jobs

    jobs = drive.until("the burst jobs to complete", done, 90)
    node = c.store.instance(inst.instance_id).instance.node_name
    assert node.startswith("cloud-aws-")
    assert {jobs[b].nodes for b in burst} == {(node,)}

    # 3. idle -> drained by the controller -> powered down by Slurm -> terminated in moto
    def gone():
        st = c.store.instance(inst.instance_id).instance.state
        return st is S.TERMINATED and not moto_instances(moto.endpoint, ctl)

    drive.until("the burst node to be terminated", gone, 90)
    final = c.store.instance(inst.instance_id)
    steps = [t.to_state for t in final.instance.history]
    assert steps == [
        S.REQUESTED,
        S.ALLOCATED,
        S.JOINING,
        S.READY,
        S.DRAINING,
        S.TERMINATING,
        S.TERMINATED,
    ], final.instance.history
    assert not cluster.launcher.running(node)
    observer = c.reconciler.deps.observer
    if isinstance(observer, FallbackSlurmObserver):  # 24.11: every pass read slurmrestd (JWT)
        assert observer.last_source == "primary" and not observer.last_primary_error
    group = aws(moto.endpoint, "autoscaling").describe_auto_scaling_groups()["AutoScalingGroups"]
    assert [g["DesiredCapacity"] for g in group] == [0]

    # 4. money: ledger == price x billed time == /v1/costs, within a cent
    clock.set(datetime.now(UTC))
    c.reconciler.run_pass()
    start = billing_start(final.instance)
    assert start is not None and final.ended_ts is not None
    expected = cost_for_seconds(inst.price_usd_hr, billed_seconds(final.ended_ts - start))
    rows = c.store.ledger_entries(instance_id=inst.instance_id)
    ledger = sum((e.cost for e in rows), Decimal(0))
    assert abs(ledger - expected) < Decimal("0.01")
    by_job = {e.job_id: e for e in rows if e.kind == "job"}
    assert set(by_job) == set(burst)  # both jobs paid their GPU-seconds; the rest is idle

    from fastapi.testclient import TestClient

    token = create_token(c.store, "viewer", "e2e", clock.now().timestamp())
    day = datetime.fromtimestamp(start, UTC).date().isoformat()
    with TestClient(c.app) as http:
        h = {"Authorization": f"Bearer {token}"}
        costs = http.get("/v1/costs", params={"group_by": "pool,kind", "from": day}, headers=h)
        assert costs.status_code == 200, costs.text
        pool_total = sum(
            Decimal(r["cost_usd"]) for r in costs.json()["rows"] if r["pool"] == "cloud-aws"
        )
        assert abs(pool_total - expected) < Decimal("0.01")
        focus = http.get("/v1/focus.csv", params={"from": day}, headers=h)
        assert focus.status_code == 200
    data = tmp_path / "focus.csv"
    data.write_text(focus.text)
    cloud_rows = [r for r in csv.DictReader(io.StringIO(focus.text)) if r["x_Pool"] == "cloud-aws"]
    assert {r["x_JobId"] for r in cloud_rows if r["x_JobId"]} == set(burst)
    assert abs(sum(Decimal(r["BilledCost"]) for r in cloud_rows) - expected) < Decimal("0.01")

    exe = require_validator()
    validate_focus(exe, data, tmp_path / "report.xml", validator_site(exe))
