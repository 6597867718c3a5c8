"""The console's waste figures and drill-down in Chromium, on a run of the real controller against
the live Slurm (22.05) and moto's server, checked against the cloud's and Slurm's own records,
never against the product's billing code.

The run: on-prem filled; two 4-GPU jobs burst one 8-GPU spot node and run there; a third
4-GPU job bursts a second node and is cancelled at once, so that node never runs a job; both
nodes are let go. Expected figures:

- each instance's bill: price (the shipped catalog's us-east-1 p4d.24xlarge spot row) x the
  seconds between moto's `LaunchTime` and the termination time in its `StateTransitionReason`
  (60 s at least, as AWS bills Linux per second);
- each job's dollars: its 4 of the node's 8 GPUs x (EndTime - StartTime) from Slurm's job
  completion log (`JobCompType=jobcomp/filetxt`, scripts/slurm-up.sh; these clusters have no
  accounting database), at that price;
- never-ran dollars: the bills of the instances whose node (the `slurm-node` tag the controller
  put on the instance in moto) has no completion record, or that never got a node.

Clocks: moto and Slurm stamp whole seconds of the wall clock; the controller reads its clock
once a pass (every 0.5 s here). Each figure is compared within $0.02: at $7.246/h that is ~10 s.
"""

from __future__ import annotations

import csv
import re
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import REPO, Driver, make, moto_instances
from slurm_harness import Cluster

from provisioner.act.ports import NODE_KEY
from provisioner.api.auth import create_token
from provisioner.bootstrap import ApiServer
from provisioner.clock import ManualClock
from provisioner.domain.instances import InstanceState
from provisioner.domain.jobs import JobState

sys.path.insert(0, str(REPO))
from tests.browser.conftest import Console

pytestmark = [pytest.mark.e2e, pytest.mark.browser]
CENTS = Decimal("0.02")
GPUS_PER_JOB, GPUS_PER_NODE = 4, 8


def catalog_price() -> Decimal:
    with (REPO / "policies" / "catalog" / "gpu_offers.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            if (row["cloud"], row["region"], row["instance_type"]) == (
                "aws",
                "us-east-1",
                "p4d.24xlarge",
            ):
                return Decimal(row["spot_usd_hr"])  # the demo pool buys spot
    raise AssertionError("no us-east-1 p4d.24xlarge row in the catalog")


def slurm_time(text: str) -> float:
    """jobcomp's times are the controller host's local time, to the second."""
    return datetime.fromisoformat(text).timestamp()


def completion_records(path: Path, ids: set[str]) -> dict[str, dict[str, str]]:
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        rec = dict(re.findall(r"(\w+)=(\S*)", line))
        if rec.get("JobId") in ids:
            out[rec["JobId"]] = rec
    return out


def moto_bills(vms: list[dict[str, Any]], price: Decimal) -> dict[str, tuple[Decimal, str]]:
    """instance id -> (its bill by moto's times, the node it was tagged with or "")."""
    out = {}
    for vm in vms:
        m = re.search(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC\)", vm["StateTransitionReason"])
        assert m, vm["StateTransitionReason"]
        ended = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        seconds = max(60.0, (ended - vm["LaunchTime"]).total_seconds())
        tags = {t["Key"]: t["Value"] for t in vm.get("Tags", [])}
        out[vm["InstanceId"]] = (price * Decimal(repr(seconds)) / 3600, tags.get(NODE_KEY, ""))
    return out


def usd(text: str) -> Decimal:
    return Decimal(text.replace("$", "").replace(",", ""))


def billed(page: Any) -> Decimal:
    return Decimal(page.get_attribute("#instance-billed", "data-usd"))


def near(got: Decimal, want: Decimal) -> bool:
    return abs(got - want) <= CENTS


@pytest.mark.parametrize("slurm_cluster", ["22.05"], indirect=True)
def test_waste_and_drill_down_in_the_browser_match_moto_and_slurms_job_log(
    cluster: Cluster, moto, tmp_path, browser
):
    clock = ManualClock(datetime.now(UTC))
    c = make(cluster, moto, tmp_path, clock)
    ctl = c.policy.controller
    drive = Driver(c, clock)
    jobcomp = Path(cluster.env["SLURM_CONF"]).parent.parent / "log" / "jobcomp.txt"

    def states() -> dict[str, JobState]:
        return {j.job_id: j.state for j in c.reconciler.last_snapshot.jobs}

    fill = [
        cluster.sbatch("-p", "onprem", "--gres=gpu:4", "-t", "10", "-J", "fill", wrap="sleep 600")
        for _ in "12"
    ]
    drive.until("on-prem full", lambda: all(states().get(f) is JobState.RUNNING for f in fill), 30)
    burst_args = ["-p", "onprem", "-A", "vision", "--gres=gpu:4", "-t", "2", "-J", "burst"]
    burst = [cluster.sbatch(*burst_args, wrap="sleep 8") for _ in "12"]
    drive.until(
        "both burst jobs running in the cloud",
        lambda: all(states().get(b) is JobState.RUNNING for b in burst),
        90,
    )
    lone = cluster.sbatch(*burst_args[:-1], "lone", wrap="sleep 5")
    drive.until("a second instance for the third job", lambda: len(c.store.instances()) >= 2, 60)
    cluster.sh("scancel", lone)

    def all_gone() -> bool:
        ended = all(si.instance.state is InstanceState.TERMINATED for si in c.store.instances())
        done = all(states().get(b) is JobState.COMPLETED for b in burst)
        return ended and done and not moto_instances(moto.endpoint, ctl)

    drive.until("both instances let go and the jobs done", all_gone, 180)
    clock.set(datetime.now(UTC))
    c.reconciler.run_pass()  # the last ledger rows; the clock stays here for the pages

    # ---- expected, from moto and Slurm's completion log
    price = catalog_price()
    vms = moto_instances(moto.endpoint, ctl, states=("terminated",))
    bills = moto_bills(vms, price)
    assert len(bills) == 2, vms
    recs = completion_records(jobcomp, {*burst, lone})
    assert {b: recs[b]["JobState"] for b in burst} == {b: "COMPLETED" for b in burst}
    assert lone not in recs or recs[lone]["StartTime"] in ("Unknown", recs[lone]["EndTime"])
    job_usd = {
        b: price
        * GPUS_PER_JOB
        / GPUS_PER_NODE
        * Decimal(repr(slurm_time(recs[b]["EndTime"]) - slurm_time(recs[b]["StartTime"])))
        / 3600
        for b in burst
    }
    ran_on = {recs[b]["NodeList"] for b in burst}
    assert len(ran_on) == 1  # both on the first node
    never_ran = {iid: bill for iid, (bill, node) in bills.items() if node not in ran_on}
    assert len(never_ran) == 1, bills
    cloud_usd = sum((b for b, _ in bills.values()), Decimal(0))
    (worked_id,) = set(bills) - set(never_ran)

    # ---- the console, in Chromium, on this run's store
    viewer = create_token(c.store, "viewer", "e2e-browser", clock.now().timestamp())
    server = ApiServer(c.app, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.start(timeout_s=60)}"
    day = clock.now().date().isoformat()
    con = Console(browser, url)
    try:
        con.sign_in(viewer)

        # Overview: this month's cloud waste
        page = con.goto("/")
        assert near(usd(page.inner_text("#waste-usd")), sum(never_ran.values()))
        sub = page.inner_text("#tile-waste .sub")
        assert "1 of 2 instance(s)" in sub, sub
        con.shot("e2e-overview")

        # Costs: the cloud total, the jobs' dollars, the never-ran dollars
        page = con.goto(f"/costs?group_by=kind&from={day}")
        assert near(usd(page.inner_text("#cost-cloud")), cloud_usd)
        kinds = {
            r.query_selector("td").inner_text(): Decimal(
                r.query_selector("td.num").get_attribute("data-usd")
            )
            for r in page.query_selector_all("#kind-table tbody tr")
        }
        assert near(kinds["job"], sum(job_usd.values()))
        total = page.query_selector("#efficiency-table tr.total")
        wasted = Decimal(
            total.query_selector("[data-field=never_ran_usd]").get_attribute("data-usd")
        )
        assert near(wasted, sum(never_ran.values()))
        con.shot("e2e-costs")
        # ... and the never-ran figure links to the rows of the instance that ran nothing
        with page.expect_navigation():
            total.query_selector("[data-field=never_ran_usd] a").click()
        page.wait_for_selector("body[data-ready='1']")
        listed = {a.inner_text() for a in page.query_selector_all("#ledger-table a")}
        assert listed & set(bills) == set(never_ran), listed
        assert Decimal(page.get_attribute("#ledger-sum", "data-usd")) == wasted

        # Drill-down: team -> its jobs -> a job -> the instance it ran on -> back
        page = con.goto("/jobs?team=vision")
        with page.expect_navigation():
            page.click(f"a[data-field=job-link][href='/jobs/{burst[0]}']")
        page.wait_for_selector("body[data-ready='1']")
        assert near(Decimal(page.get_attribute("#job-cost", "data-usd")), job_usd[burst[0]])
        assert recs[burst[0]]["NodeList"] in page.inner_text("main")
        con.shot("e2e-job")
        with page.expect_navigation():
            page.click("a[data-field=instance-link]")
        page.wait_for_selector("body[data-ready='1']")
        assert worked_id in page.url
        assert near(billed(page), bills[worked_id][0])
        ran = {a.inner_text() for a in page.query_selector_all("a[href^='/jobs/']")}
        assert ran == set(burst)  # not the jobs earlier tests ran on a node of that name
        con.shot("e2e-instance")
        # ... back to its pool's instances: both, and their total is moto's bills
        with page.expect_navigation():
            page.click("#back-to-pool")
        page.wait_for_selector("body[data-ready='1']")
        totals = page.query_selector("#instance-totals")
        assert totals.get_attribute("data-count") == "2"
        assert near(Decimal(totals.get_attribute("data-usd")), cloud_usd)
        ((idle_id, idle_bill),) = never_ran.items()
        page = con.goto(f"/instances/{idle_id}")
        assert near(billed(page), idle_bill)
        assert not page.query_selector("a[href^='/jobs/']"), "it ran no job"
        assert not con.errors, con.errors
    finally:
        con.close()
        server.stop()
        c.store.close()
