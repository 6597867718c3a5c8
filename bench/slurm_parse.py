"""Reading a 10,000-job `squeue --json` document into a snapshot. Target: under 1 s.

The document is synthetic but shaped like real Slurm 22.05 output: every job is a full copy of a
record from tests/fixtures/slurm/squeue.json (all ~110 fields), with ids, states, partitions,
GPU requests, accounts and node lists varied. Timed: json.loads of the text plus parsing jobs and
nodes (sinfo --json sample) into a ClusterSnapshot, best of 5 runs. The last line printed is one
JSON object of the figures.
"""

from __future__ import annotations

import copy
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner.observe.slurm.parse import parse_snapshot  # noqa: E402

FIX = REPO / "tests" / "fixtures" / "slurm"
N_JOBS = 10_000
TARGET_S = 1.0


def synthetic_squeue(n: int, seed: int = 7) -> str:
    sample = json.loads((FIX / "squeue.json").read_text())
    running_tpl = sample["jobs"][0]
    pending_tpl = next(j for j in sample["jobs"] if j["job_state"] == "PENDING")
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        running = rng.random() < 0.3
        rec = copy.deepcopy(running_tpl if running else pending_tpl)
        gpus = rng.choice([1, 1, 2, 4, 8])
        rec["job_id"] = 1000 + i
        rec["name"] = f"train-{i}"
        rec["account"] = rng.choice(["gputeam", "research", "vision", "nlp"])
        rec["user_name"] = f"user{rng.randrange(200)}"
        rec["submit_time"] = 1796020000 + i
        rec["time_limit"] = rng.choice([None, 60, 240, 1440])
        rec["tres_per_node"] = rng.choice([f"gres:gpu:{gpus}", f"gres:gpu:a100:{gpus}"])
        if running:
            node = f"onprem-{rng.randrange(1, 257)}"
            rec["nodes"] = node
            rec["batch_host"] = node
            rec["start_time"] = 1796020000 + i + 5
        else:
            rec["partition"] = rng.choice(["onprem", "onprem,cloud", "cloud"])
        jobs.append(rec)
    sample["jobs"] = jobs
    return json.dumps(sample, indent=1)


def main() -> None:
    squeue = synthetic_squeue(N_JOBS)
    sinfo = (FIX / "sinfo.json").read_text()
    times = []
    snap = None
    for _ in range(5):
        t0 = time.perf_counter()
        snap = parse_snapshot(squeue, sinfo, taken_ts=1796030000.0)
        times.append(time.perf_counter() - t0)
    assert snap is not None and len(snap.jobs) == N_JOBS
    t0 = time.perf_counter()
    json.loads(squeue)
    json_s = time.perf_counter() - t0
    best = min(times)
    figures = {
        "bench": "slurm_parse",
        "jobs": N_JOBS,
        "document_mb": round(len(squeue.encode()) / 1e6, 1),
        "parse_s_best": round(best, 3),
        "parse_s_median": round(sorted(times)[len(times) // 2], 3),
        "json_loads_s": round(json_s, 3),
        "jobs_per_s": round(N_JOBS / best),
        "pending": len(snap.pending),
        "running": len(snap.running),
        "target_s": TARGET_S,
        "ok": best < TARGET_S,
    }
    print(f"squeue --json with {N_JOBS} jobs ({figures['document_mb']} MB) -> snapshot:")
    print(
        f"  best {best:.3f} s, median {figures['parse_s_median']:.3f} s of 5 "
        f"(json.loads alone {json_s:.3f} s); target < {TARGET_S} s"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
