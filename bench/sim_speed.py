"""Simulator speed as a ratio: this tree against a baseline commit, in one run.

The baseline (default: ff630d9, main before the simulator speed work) is checked out in a
temporary git worktree and run with the same interpreter. Each row (on-prem GPUs x estimate,
published model: $4.10/GPU-h, boot 0 s, 8-GPU nodes, the `default` policy over the bundled
trace) runs in a fresh process per tree, alternating baseline and current so that machine
noise hits both alike; the best of `--repeat` runs counts. Target: >= 4x on every row.

Each run also times the planner calls (`plan()`, wrapped where the engine calls it), so a row
shows how far a faster planner alone could take it: `ceiling` is the baseline's time over this
tree's time outside `plan()`, the speedup if planning cost nothing.
`--peer DIR` times Starburst's own simulator instead (a local copy of michaelzhiluo/starburst,
fetched by hand and never committed; `--peer-python` names an interpreter with its numpy,
pandas, tabulate and tqdm): bench/peers/starburst.py runs it over the same trace on the four
Philly rows (256, 384, 512, 768 GPUs), its `starburst` policy against our `default` with exact
runtimes and its constant wait against ours without estimates, alternating the two per row;
`--peer-loop 0` turns its loop scheduling off (plain FIFO, faster).
Target: ours >= 5x faster on every row.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "ff630d9"
ROWS = [(g, e) for g in (256, 512, 768) for e in ("exact", "none")]

CHILD = """
import json, sys, time
from decimal import Decimal
import provisioner
assert provisioner.__file__.startswith(sys.argv[4]), provisioner.__file__
from provisioner.config import load_policy
from provisioner.simulate import engine
from provisioner.simulate.engine import SimSettings, flat_catalog, simulate
from provisioner.simulate.trace import load_trace
root, gpus, est = sys.argv[1], int(sys.argv[2]), sys.argv[3]
jobs = load_trace(root + "/data/traces/philly_2017-10-02_4w.csv.gz")
policy = load_policy(root + "/policies")
flat = flat_catalog(Decimal("4.10"), policy.onprem.gpu_model, sorted({j.gpus for j in jobs}))
s = SimSettings(onprem_gpus=gpus, gpus_per_node=8, boot_s=0.0, estimate=est, billing_min_s=0.0)
in_plan = [0.0]
planner = engine.plan
def timed(*args, **kwargs):
    t = time.perf_counter()
    try:
        return planner(*args, **kwargs)
    finally:
        in_plan[0] += time.perf_counter() - t
engine.plan = timed
t0 = time.perf_counter()
r = simulate(jobs, s, policy, flat, "default")
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "plan_s": in_plan[0], "usd": str(r.cloud_cost_usd)}))
"""


def _time(tree: Path, gpus: int, est: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), str(gpus), est, str(tree)],
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        cwd=tree,  # `python -c` puts the working directory first on sys.path
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


PEER_ROWS = [(g, e) for e in ("exact", "none") for g in (256, 384, 512, 768)]
PEER_POLICY = {"exact": "starburst", "none": "constant-wait"}


def _time_peer(peer: str, python: str, gpus: int, est: str, loop: bool) -> dict[str, object]:
    out = subprocess.run(
        [python, str(ROOT / "bench" / "peers" / "starburst.py"), peer,
         str(ROOT / "data/traces/philly_2017-10-02_4w.csv.gz"), str(gpus), PEER_POLICY[est],
         "1" if loop else "0"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def peer_main(peer: str, python: str, repeat: int, loop: bool) -> None:
    records = []
    for gpus, est in PEER_ROWS:
        p_best = c_best = float("inf")
        for _ in range(repeat):
            p = _time_peer(peer, python, gpus, est, loop)
            c = _time(ROOT, gpus, est)
            p_best = min(p_best, float(p["wall_s"]))  # type: ignore[arg-type]
            c_best = min(c_best, float(c["wall_s"]))  # type: ignore[arg-type]
        ratio = p_best / c_best
        print(
            f"{gpus} GPUs, {est}: Starburst ({PEER_POLICY[est]}, loop {int(loop)}) {p_best:.2f} s, "
            f"ours (default) "
            f"{c_best:.2f} s: {ratio:.2f}x faster (target >= 5x); Starburst's cloud "
            f"${float(p['cloud_gpu_h']) * 4.10:,.0f}, ours ${float(c['usd']):,.0f}"  # type: ignore[arg-type]
        )
        records.append(
            {
                "onprem_gpus": gpus,
                "estimate": est,
                "starburst_policy": PEER_POLICY[est],
                "starburst_loop": loop,
                "starburst_s": round(p_best, 3),
                "ours_s": round(c_best, 3),
                "speedup": round(ratio, 2),
            }
        )
    worst = min(float(r["speedup"]) for r in records)  # type: ignore[arg-type]
    print(json.dumps({"peer": "starburst", "rows": records, "min_speedup": worst}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--rows", default="", help="e.g. 512:exact,512:none (default: all six)")
    ap.add_argument("--peer", default="", help="a local copy of Starburst's repository")
    ap.add_argument("--peer-python", default=sys.executable)
    ap.add_argument("--peer-loop", type=int, default=1, help="Starburst's loop scheduling: 1 or 0")
    args = ap.parse_args()
    if args.peer:
        peer_main(args.peer, args.peer_python, args.repeat, bool(args.peer_loop))
        return
    rows = ROWS
    if args.rows:
        rows = [(int(r.split(":")[0]), r.split(":")[1]) for r in args.rows.split(",")]
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.baseline],
            check=True,
            capture_output=True,
        )
        try:
            for gpus, est in rows:
                b_best = c_best = float("inf")
                c_plan = 0.0
                b_usd = c_usd = ""
                for _ in range(args.repeat):
                    b = _time(base, gpus, est)
                    c = _time(ROOT, gpus, est)
                    b_best = min(b_best, float(b["wall_s"]))  # type: ignore[arg-type]
                    if float(c["wall_s"]) < c_best:  # type: ignore[arg-type]
                        c_best = float(c["wall_s"])  # type: ignore[arg-type]
                        c_plan = float(c["plan_s"])  # type: ignore[arg-type]
                    b_usd, c_usd = str(b["usd"]), str(c["usd"])
                ratio = b_best / c_best
                ceiling = b_best / max(1e-9, c_best - c_plan)
                same = b_usd == c_usd
                print(
                    f"{gpus} GPUs, estimate {est}: baseline {b_best:.2f} s, this tree "
                    f"{c_best:.2f} s ({c_plan:.2f} s in plan()): {ratio:.2f}x faster "
                    f"(target >= 4x; {ceiling:.2f}x if plan() were free); cloud $ "
                    f"{'identical' if same else f'{b_usd} -> {c_usd}'}"
                )
                records.append(
                    {
                        "onprem_gpus": gpus,
                        "estimate": est,
                        "baseline_s": round(b_best, 3),
                        "current_s": round(c_best, 3),
                        "current_plan_s": round(c_plan, 3),
                        "speedup": round(ratio, 2),
                        "ceiling_if_plan_free": round(ceiling, 2),
                        "same_dollars": same,
                    }
                )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                check=False,
                capture_output=True,
            )
    worst = min(float(r["speedup"]) for r in records)  # type: ignore[arg-type]
    print(json.dumps({"baseline": args.baseline, "rows": records, "min_speedup": worst}))


if __name__ == "__main__":
    main()
