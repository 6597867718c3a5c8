"""One policy-selection round of the controller, at the Philly trace's density: the jobs table
(SQLite) holds the bundled trace's jobs of one week (each as if it ran from its submit for its
runtime, under a time limit from the published model of user estimates, seed 7, as every Slurm
job has one, so the replays run as the controller's do at a real site), and the controller's
selector (reconcile/policy_selection.py) replays that window once per portfolio candidate and
under immediate, in its own process, against the bundled catalog and
256 on-prem GPUs.

Reported: how long the tick that starts a round holds the pass (reading the window, handing it
to the worker), the round's CPU time in the worker, and that as a share of one core over the
selection interval (target < 10%). Last line: one JSON object.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.config import load_policy  # noqa: E402
from provisioner.domain.job_records import JobRecord  # noqa: E402
from provisioner.plan.catalog import load_catalog  # noqa: E402
from provisioner.reconcile.policy_selection import PolicySelector  # noqa: E402
from provisioner.simulate.engine import job_limits  # noqa: E402
from provisioner.simulate.trace import load_trace  # noqa: E402
from provisioner.store import Store  # noqa: E402

WEEK = 7 * 86_400.0


def main() -> None:
    policy = load_policy(ROOT / "policies")
    jobs = load_trace(ROOT / "data/traces/philly_2017-10-02_4w.csv.gz")
    t0 = jobs[0].submit_s + WEEK  # the second week: the cluster is not empty at its start
    now = t0 + WEEK
    limits = job_limits(jobs, None, 7)
    records = []
    for j, limit in zip(jobs, limits, strict=True):
        if j.submit_s >= now or j.submit_s + j.duration_s < t0:
            continue
        end = j.submit_s + j.duration_s
        records.append(
            JobRecord(
                j.job_id, j.submit_s, "completed" if end <= now else "running", j.gpus,
                account=j.group, user=j.user, start_ts=j.submit_s,
                end_ts=end if end <= now else None, last_seen_ts=now, time_limit_s=limit,
            )
        )  # fmt: skip
    tmp = tempfile.mkdtemp()
    store = Store(f"sqlite:///{tmp}/selection.db")
    store.record_jobs(records)
    interval = policy.selection.interval_s
    sel = PolicySelector(store, policy, load_catalog(), now=now - interval)
    try:
        started = time.perf_counter()
        sel.tick(now, onprem_gpus=256, gpus_per_node=8)
        hold = time.perf_counter() - started
        ticks = 0
        decision = None
        while decision is None:
            time.sleep(0.05)
            ticks += 1
            decision = sel.tick(now + 1, onprem_gpus=256, gpus_per_node=8)
        wall = time.perf_counter() - started
    finally:
        sel.close()
        store.close()
    cpu = float(decision.detail["replay_cpu_s"])
    n_cands = sum(k.startswith("candidate ") for k in decision.detail)
    share = cpu / interval
    print(
        f"{len(records)} jobs in the window ({decision.detail['window_jobs']} replayed), "
        f"{n_cands} candidates + immediate: the starting tick held the pass "
        f"{hold * 1000:.0f} ms; the round took {cpu:.1f} s of CPU in its own process "
        f"({wall:.1f} s wall, {ticks} ticks went on meanwhile) = {share:.3%} of one core over "
        f"the {interval:.0f} s interval (target < 10%); chose {decision.detail['chosen']}: "
        f"{decision.detail['why']}"
    )
    print(
        json.dumps(
            {
                "window_jobs": len(records),
                "start_tick_ms": round(hold * 1000, 1),
                "round_cpu_s": cpu,
                "round_wall_s": round(wall, 2),
                "interval_s": interval,
                "core_share": round(share, 6),
            }
        )
    )


if __name__ == "__main__":
    main()
