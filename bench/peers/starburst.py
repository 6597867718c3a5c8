"""Runs Starburst's own simulator (michaelzhiluo/starburst, MIT) over the bundled Philly trace,
for `bench/sim_speed.py --peer DIR`. It runs under the peer's interpreter (Starburst needs
numpy, tabulate and tqdm, which this project does not), imports only the standard library and
the peer, and is never given the peer's code to keep: DIR is a local copy fetched by hand.

Jobs are built as Starburst builds Philly jobs (skyburst/job_generator.py,
process_philly_jobs): arrival and runtime in hours, cost in GPU-hours. Policies: `starburst`
(linear_cost-0.076 with loop scheduling, its Philly end-to-end setting, runtimes known) and
`constant-wait` (constant-1, no runtime needed); LOOP 0 turns loop scheduling off (plain FIFO:
faster, and nearer the Starburst figures of bench/robustness.py).
Usage: python bench/peers/starburst.py DIR TRACE GPUS POLICY [LOOP]. Prints one JSON object.
A helper of bench/sim_speed.py, not a benchmark: it lives outside bench/*.py, which `make
bench` runs one by one without arguments.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import sys
import time

POLICIES = {"starburst": "linear_cost-0.076", "constant-wait": "constant-1"}


def main() -> None:
    peer, trace, gpus, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    loop = len(sys.argv) < 6 or sys.argv[5] != "0"
    os.environ.setdefault("TQDM_DISABLE", "1")
    sys.path.insert(0, peer)
    from skyburst import Job, run_simulator  # type: ignore[import-not-found]

    with io.TextIOWrapper(gzip.open(trace, "rb"), encoding="utf-8-sig", newline="") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: (float(r["submit_s"]), r["job_id"]))
    start = float(rows[0]["submit_s"])
    jobs = []
    for idx, r in enumerate(rows):
        g, run = int(float(r["gpus"])), float(r["duration_s"]) / 3600.0
        arrival = (float(r["submit_s"]) - start) / 3600.0
        jobs.append(Job(idx, arrival=arrival, runtime=run, resources={"GPUs": g}, cost=g * run))
    spec = {
        "cluster_size": gpus // 8,
        "gpus_per_node": 8,
        "sched_alg": "fifo",
        "waiting_policy": POLICIES[name],
        "loop": loop,
        "warmup_jobs": 0,
    }
    t0 = time.perf_counter()
    result = run_simulator(jobs, spec)
    wall = time.perf_counter() - t0
    stats = result["stats"]
    print(
        json.dumps(
            {
                "wall_s": wall,
                "cloud_gpu_h": stats["total_cloud_cost"],
                "avg_jct_h": stats.get("avg_jct"),
                "jobs": len(jobs),
            }
        )
    )


if __name__ == "__main__":
    main()
