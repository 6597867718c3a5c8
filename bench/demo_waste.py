"""The demo a user can trust: how much of `make run`'s cloud money buys nothing.

Runs the demo (`provisioner demo`, the same `run_demo`) for --wall-s wall seconds (default 600)
at its default speed (120x) on its fixed slice of the bundled Philly trace (from hour 12, 48
hours; the demo draws no random numbers, so the slice is the whole of its input), then judges
it from outside the product's billing:

* every instance from moto's own records (DescribeInstances, terminated ones included): its
  LaunchTime and the time in its StateTransitionReason, both on the demo's clock (the demo keeps
  its stand-in cloud there), and its price from the shipped catalog by type and capacity tag,
  per second with a 60 s minimum;
* which instances ran a job, and which joined, from the demo Slurm's own logs: each job run
  names the machine under its node, each node registration the machine that booted as it;
* waste = the dollars of instances that never ran a job / all cloud dollars;
* every instance joined, or was let go within its pool's join timeout on the demo's clock (one
  still booting at the end counts as in flight if its join timeout has not passed);
* every lifecycle history in the store runs forwards.

Beside it, the same share as the console's Overview computes it from the ledger, for comparison.
Targets: waste < 5 %, every instance joined or released in time, no history backwards.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import tempfile
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.demo.runner import DemoOptions, DemoWorld, run_demo  # noqa: E402

CATALOG = ROOT / "policies" / "catalog" / "gpu_offers.csv"
_ENDED = re.compile(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:UTC|GMT)\)")


def prices() -> dict[tuple[str, str, str], Decimal]:
    """(region, instance type, capacity) -> $/h, from the shipped price list."""
    out: dict[tuple[str, str, str], Decimal] = {}
    with CATALOG.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["cloud"] != "aws":
                continue
            key = (row["region"], row["instance_type"])
            out[(*key, "on-demand")] = Decimal(row["ondemand_usd_hr"])
            if row["spot_usd_hr"]:
                out[(*key, "spot")] = Decimal(row["spot_usd_hr"])
    return out


def moto_instances(endpoint: str) -> list[dict[str, Any]]:
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="demo", aws_secret_access_key="demo")  # fmt: skip
    out: list[dict[str, Any]] = []
    for page in ec2.get_paginator("describe_instances").paginate():
        for res in page["Reservations"]:
            out.extend(res["Instances"])
    return out


def judge(world: DemoWorld, join_timeout_s: float) -> dict[str, Any]:
    price_of = prices()
    ran = {r.machine for r in world.fake.runs if r.machine}
    ran |= {
        n.machine for n in world.fake.nodes.values() if n.machine and n.power == "on" and n.alloc
    }
    joined = {m for _, m, _ in world.fake.boots if m}
    cloud = wasted = Decimal(0)
    late: list[str] = []
    in_flight = 0
    rows = []
    for inst in moto_instances(world.aws_endpoint):
        iid = inst["InstanceId"]
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        capacity = "spot" if tags.get("capacity") == "spot" else "on-demand"
        region = inst["Placement"]["AvailabilityZone"][:-1]
        price = price_of[(region, inst["InstanceType"], capacity)]
        launched = inst["LaunchTime"].timestamp()
        m = _ENDED.search(str(inst.get("StateTransitionReason") or ""))
        ended = (
            datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
            if m and inst["State"]["Name"] in ("shutting-down", "terminated")
            else None
        )
        run_s = (ended if ended is not None else world.now_ts) - launched
        cost = price * Decimal(repr(max(60.0, run_s))) / 3600
        cloud += cost
        if iid not in ran:
            wasted += cost
        if iid not in joined:
            if ended is None and world.now_ts - launched <= join_timeout_s:
                in_flight += 1
            elif ended is None or ended - launched > join_timeout_s:
                late.append(iid)
        rows.append((iid, capacity, round(run_s), str(cost.quantize(Decimal("0.01"))),
                     iid in ran, iid in joined))  # fmt: skip
    return {
        "instances": len(rows),
        "ran_a_job": sum(1 for r in rows if r[4]),
        "joined": sum(1 for r in rows if r[5]),
        "in_flight_at_end": in_flight,
        "not_joined_nor_released_in_time": late,
        "cloud_usd": str(cloud.quantize(Decimal("0.01"))),
        "wasted_usd": str(wasted.quantize(Decimal("0.01"))),
        "waste_share": round(float(wasted / cloud), 4) if cloud else None,
    }


def product_view(world: DemoWorld) -> dict[str, Any]:
    """What the product itself says: the console's waste share, and histories in order."""
    from provisioner.account.cloud_waste import cloud_waste
    from provisioner.store import Store

    store = Store(f"sqlite:///{world.store_path}")
    try:
        w = cloud_waste(store, world.start_ts - 86_400, world.now_ts + 1)
        backwards = 0
        for si in store.instances():
            steps = [t.at_ts for t in si.instance.history]
            backwards += steps != sorted(steps)
    finally:
        store.close()
    return {
        "console_waste_share": round(w.share, 4) if w.share is not None else None,
        "console_cloud_usd": str(w.cloud_usd),
        "histories_backwards": backwards,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--wall-s", type=float, default=600.0)
    ap.add_argument("--quiet", action="store_true", help="do not echo the demo's lines")
    args = ap.parse_args(argv)
    from provisioner.config import load_policy
    from provisioner.demo.runner import DEMO_POLICIES

    join_timeout_s = load_policy(DEMO_POLICIES).guardrails.join_timeout_s
    out: dict[str, Any] = {}
    lines: list[str] = []

    def echo(line: str) -> None:
        lines.append(line)
        if not args.quiet:
            print(line, flush=True)

    def inspect(world: DemoWorld) -> None:
        out.update(judge(world, join_timeout_s))
        out.update(product_view(world))
        out["simulated_s"] = round(world.now_ts - world.start_ts)

    with tempfile.TemporaryDirectory() as tmp:
        opts = DemoOptions(port=0, duration_s=args.wall_s, data_dir=Path(tmp))
        result = run_demo(opts, echo=echo, inspect=inspect)
    out.update(
        {
            "wall_s": result["wall_s"],
            "speed": opts.speed,
            "trace_slice": f"philly_2017-10-02_4w from hour {opts.start_hour:g}, {opts.hours:g} h",
            "join_timeout_s": join_timeout_s,
            "pass_failures": sum("reconcile pass failed" in ln for ln in lines),
            "targets": {
                "waste_share": "< 0.05",
                "not_joined_nor_released_in_time": "none",
                "histories_backwards": 0,
            },
        }
    )
    out["met"] = bool(
        out.get("waste_share") is not None
        and out["waste_share"] < 0.05
        and not out["not_joined_nor_released_in_time"]
        and out["histories_backwards"] == 0
    )
    print(json.dumps(out, sort_keys=True))
    return 0 if out["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
