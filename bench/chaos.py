"""The seeded chaos soak: faults injected by kind, invariant checks made, violations, and time
to recover after each kill.

    python bench/chaos.py [--seeds N] [--first S] [--steps K] [--jobs J]
    python bench/chaos.py --live [--seeds N] [--series 22.05,24.11]

The default soak (provisioner/demo/chaos.py) runs the controller in this process against
moto's server (AWS), the Compute Engine fake (GCP) and the in-memory fake Slurm, hours of
trace at accelerated time. `--live` runs the soak on real parts (tests/chaos/live_soak.py):
the `provisioner run` process killed with SIGKILL, the local slurmctld (each release given)
and moto's server, in wall time (a seed takes one to eight minutes).

Prints one line per seed, then one JSON object of the figures (the last line).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from provisioner.demo.chaos import run_seeds

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    ap.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    ap.add_argument("--steps", type=int, default=60, help="faulty passes per seed (default 60)")
    ap.add_argument("--jobs", type=int, default=24, help="Philly jobs per seed (default 24)")
    ap.add_argument("--live", action="store_true", help="the soak on real parts (see above)")
    ap.add_argument("--series", default="22.05,24.11", help="--live: Slurm releases")
    args = ap.parse_args()
    seeds = list(range(args.first, args.first + args.seeds))
    t0 = time.monotonic()
    if args.live:
        live = _live(seeds, args.series.split(","), jobs=min(args.jobs, 12))
        live["wall_s"] = round(time.monotonic() - t0, 1)
        print(json.dumps(live))
        return
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        out: dict[str, object] = {}
        for seed in seeds:
            one = run_seeds([seed], Path(tmp), steps=args.steps, jobs=args.jobs)
            print(
                f"seed {seed}: {one['faults']} faults, {one['checks']} checks, "
                f"{one['violations']} violations {one['violation_texts'] or ''}",
                flush=True,
            )
            out = _merge(out, one)
    out["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out))


def _live(seeds: list[int], series: list[str], *, jobs: int) -> dict[str, Any]:
    sys.path[:0] = [str(REPO / "tests" / "slurm"), str(REPO / "tests" / "chaos")]
    from live_soak import LiveSoak, summarize
    from slurm_harness import _reset, open_cluster

    from provisioner.testing.moto_faults import FaultyMotoServer

    results = []
    moto = FaultyMotoServer().start()
    try:
        with tempfile.TemporaryDirectory(prefix="live-chaos-") as tmp:
            for release in series:
                saved = dict(os.environ)
                try:
                    cluster = open_cluster(release)
                    for seed in seeds:
                        _reset(cluster)
                        moto.reset()
                        r = LiveSoak(seed, cluster, moto, Path(tmp), jobs=jobs).run()
                        results.append(r)
                        print(
                            f"slurm {release} seed {seed}: {sum(r.faults.values())} faults, "
                            f"{r.checks} checks, {len(r.violations)} violations "
                            f"{r.violations or ''} ({r.wall_s:.0f} s)",
                            flush=True,
                        )
                    _reset(cluster)
                finally:
                    os.environ.clear()
                    os.environ.update(saved)
    finally:
        moto.stop()
    out = summarize(results)
    out["series"] = series
    return out


def _merge(acc: dict[str, object], one: dict[str, object]) -> dict[str, object]:
    if not acc:
        return dict(one)
    merged = dict(acc)
    keys = ("seeds", "faults", "checks", "violations", "jobs", "instances", "gcp_instances",
            "kills", "lost_to_rollback", "overbilled_after_rollback")  # fmt: skip
    for key in keys:
        merged[key] = int(acc[key]) + int(one[key])  # type: ignore[call-overload]
    for key in ("lost_to_rollback_usd", "overbilled_after_rollback_usd"):
        merged[key] = str(Decimal(str(acc[key])) + Decimal(str(one[key])))
    kinds = dict(acc["faults_by_kind"])  # type: ignore[call-overload]
    for k, v in dict(one["faults_by_kind"]).items():  # type: ignore[call-overload]
        kinds[k] = kinds.get(k, 0) + v
    merged["faults_by_kind"] = kinds
    merged["violation_texts"] = [*acc["violation_texts"], *one["violation_texts"]][:20]  # type: ignore[misc]
    for key in ("recover_s_p50", "recover_s_max"):
        vals = [v for v in (acc[key], one[key]) if v is not None]
        merged[key] = max(vals) if vals else None  # type: ignore[type-var]
    return merged


if __name__ == "__main__":
    main()
