"""`adaptive` on the bundled Philly trace, published model ($4.10/GPU-h, boot 0): its dollars
and JCT against every fixed candidate of the portfolio replayed beside it, the best of them in
hindsight (JCT within the policy's bound of immediate's), `immediate`, and Starburst's
no-estimate figures.

Rows: 256, 384, 512 and 768 on-prem GPUs, with --estimate none, history, limits and
history+limits (limits from the published model, seed 7), over --seeds seeds (seed 0: the trace
as is; others: arrivals jittered by up to 1 ms, as bench/robustness.py does).

`--sweep`: instead, one seed of the robustness sweep's other rows (bench/robustness.py): the
four synthetic traces in the published model and the bundled trace with the real catalog (boot
300 s, 60 s minimum), at --gpus, with --estimate; checked: adaptive <= the best fixed candidate
+ 5% and <= immediate. `--sweep-all`: every one of the sweep's 150 rows (its five traces, both
models, 192-768 GPUs, exact, none and history), `--part k --parts n` taking every n-th row from
the k-th (to run the parts side by side), and `--estimate` keeping only those modes' rows;
`--merge FILE...` reads the parts' last lines and prints the whole table's summary.

Targets (issue 31): adaptive <= the best fixed candidate + 5% and <= immediate, on every row;
history: <= 1.0x Starburst's no-estimate dollars at 768 and <= 0.90x at 384 and 512;
history+limits: <= 0.80x at 384 and 512 with a JCT no higher than Starburst's.
Last line: one JSON object, one record per row and seed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from robustness import STARBURST, jittered, synthetic  # noqa: E402

from provisioner.config import load_policy  # noqa: E402
from provisioner.plan.catalog import load_catalog  # noqa: E402
from provisioner.simulate.adaptive import simulate_adaptive  # noqa: E402
from provisioner.simulate.engine import SimSettings, flat_catalog  # noqa: E402
from provisioner.simulate.trace import load_trace  # noqa: E402

GPUS = (256, 384, 512, 768)
ESTIMATES = ("none", "history", "limits", "history+limits")
# x Starburst's no-estimate dollars; (target, JCT no higher than Starburst's too)
TARGETS = {
    ("history", 768): (1.00, False),
    ("history", 384): (0.90, False),
    ("history", 512): (0.90, False),
    ("history+limits", 384): (0.80, True),
    ("history+limits", 512): (0.80, True),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--gpus", type=int, nargs="*", default=list(GPUS))
    # default: the four Philly modes; with --sweep-all, only the rows of the modes named
    ap.add_argument("--estimate", nargs="*", default=None)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--sweep-all", action="store_true")
    ap.add_argument("--part", type=int, default=0)
    ap.add_argument("--parts", type=int, default=1)
    ap.add_argument("--merge", nargs="*", default=[])
    args = ap.parse_args()
    if args.merge:
        merge(args.merge)
        return
    modes = args.estimate or list(ESTIMATES)
    if args.sweep or args.sweep_all:
        if args.sweep_all:
            rows = [r for r in _all_rows() if args.estimate is None or r[2] in modes]
            picked = rows[args.part :: args.parts]
        else:
            picked = [(t, m, e, g) for t, m in SWEEP_ROWS for e in modes for g in args.gpus]
        sweep(picked)
        return
    policy = load_policy(ROOT / "policies")
    base = load_trace(ROOT / "data/traces/philly_2017-10-02_4w.csv.gz")
    catalog = flat_catalog(Decimal("4.10"), policy.onprem.gpu_model, sorted({j.gpus for j in base}))
    bound = policy.selection.jct_bound
    records: list[dict[str, object]] = []
    print(
        "| estimate | GPUs | seed | adaptive $ / JCT | best fixed in hindsight | immediate $ / JCT "
        "| regret vs best | x Starburst none | switches | target | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for est in modes:
        for gpus in args.gpus:
            for seed in range(args.seeds):
                jobs = jittered(base, seed)
                settings = SimSettings(gpus, 8, boot_s=0.0, estimate=est, billing_min_s=0.0)  # type: ignore[arg-type]
                t0 = time.perf_counter()
                a = simulate_adaptive(jobs, settings, policy, catalog)
                wall = time.perf_counter() - t0
                best = a.best_fixed(bound)
                usd = float(a.result.cloud_cost_usd)
                best_usd = float(best.cloud_cost_usd)
                imm_usd = float(a.immediate.cloud_cost_usd)
                sb_usd, sb_jct = STARBURST[gpus]["none"]
                x_sb = usd / sb_usd
                regret = usd / best_usd - 1 if best_usd else 0.0
                met = ["best+5%" if regret <= 0.05 else "best+5% missed"]
                met.append("<= imm" if usd <= imm_usd else "<= imm missed")
                tgt = TARGETS.get((est, gpus))
                if tgt is not None:
                    ok = x_sb <= tgt[0] and (not tgt[1] or a.result.avg_jct_s <= sb_jct)
                    met.append(f"{tgt[0]:.2f}x SB {'met' if ok else 'missed'}")
                switches = sum(c.switched for c in a.choices)
                print(
                    f"| {est} | {gpus} | {seed} | ${usd / 1e3:,.1f}k / {a.result.avg_jct_s:,.0f} "
                    f"| {best.policy} ${best_usd / 1e3:,.1f}k / {best.avg_jct_s:,.0f} "
                    f"| ${imm_usd / 1e3:,.1f}k / {a.immediate.avg_jct_s:,.0f} | {regret:+.1%} "
                    f"| {x_sb:.3f} | {switches} | {'; '.join(met)} | {wall:.0f} |",
                    flush=True,
                )
                records.append(
                    {
                        "estimate": est,
                        "onprem_gpus": gpus,
                        "seed": seed,
                        "adaptive_usd": round(usd),
                        "adaptive_jct_s": round(a.result.avg_jct_s),
                        "best_fixed": best.policy,
                        "best_fixed_usd": round(best_usd),
                        "best_fixed_jct_s": round(best.avg_jct_s),
                        "immediate_usd": round(imm_usd),
                        "immediate_jct_s": round(a.immediate.avg_jct_s),
                        "regret_vs_best": round(regret, 4),
                        "x_starburst_none": round(x_sb, 3),
                        "switches": switches,
                        "chosen": [c.chosen for c in a.choices if c.switched],
                        "candidates": {
                            r.policy: [round(float(r.cloud_cost_usd)), round(r.avg_jct_s)]
                            for r in a.candidates
                        },
                        "wall_s": round(wall, 1),
                    }
                )
    means = {}
    for est in modes:
        for gpus in args.gpus:
            rows = [r for r in records if r["estimate"] == est and r["onprem_gpus"] == gpus]
            xs = [float(r["x_starburst_none"]) for r in rows]  # type: ignore[arg-type]
            means[f"{est}/{gpus}"] = {"x_starburst_mean": round(statistics.mean(xs), 3),
                                      "x_starburst_worst": max(xs)}  # fmt: skip
    print(json.dumps({"rows": records, "means": means}))


# The robustness sweep's traces (bench/robustness.py), and the rows `--sweep` runs.
SYNTHETIC = ((1.0, 0.75), (1.0, 1.25), (3.0, 0.75), (3.0, 1.25))
TRACES = ("philly-s0", *(f"gamma-cv{cv:g}-x{rate:g}" for cv, rate in SYNTHETIC))
SWEEP_ROWS = [*((t, "published") for t in TRACES[1:]), ("philly-s0", "catalog")]
SWEEP_GPUS = (192, 256, 384, 512, 768)
SWEEP_ESTIMATES = ("exact", "none", "history")


def _all_rows() -> list[tuple[str, str, str, int]]:
    """(trace, model, estimate, GPUs) of every robustness-sweep row, in its order."""
    return [
        (t, m, e, g)
        for t in TRACES
        for m in ("published", "catalog")
        for g in SWEEP_GPUS
        for e in SWEEP_ESTIMATES
    ]


def sweep(rows: list[tuple[str, str, str, int]]) -> None:
    policy = load_policy(ROOT / "policies")
    base = load_trace(ROOT / "data/traces/philly_2017-10-02_4w.csv.gz")
    flat = flat_catalog(Decimal("4.10"), policy.onprem.gpu_model, sorted({j.gpus for j in base}))
    traces = {"philly-s0": base}
    for k, (cv, rate) in enumerate(SYNTHETIC):
        traces[TRACES[k + 1]] = synthetic(base, cv, rate, seed=100 + k)
    catalogs = {"published": flat, "catalog": load_catalog()}
    bound = policy.selection.jct_bound
    records = []
    print("| trace | model | estimate | GPUs | adaptive $ / JCT | best fixed | immediate $ "
          "| regret | met |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name, model, est, gpus in rows:
        jobs, cat = traces[name], catalogs[model]
        if model == "published":
            st = SimSettings(gpus, 8, boot_s=0.0, estimate=est, billing_min_s=0.0)  # type: ignore[arg-type]
        else:
            st = SimSettings(gpus, 8, boot_s=300.0, estimate=est, billing_min_s=60.0)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        a = simulate_adaptive(jobs, st, policy, cat)
        best = a.best_fixed(bound)
        usd, b_usd = float(a.result.cloud_cost_usd), float(best.cloud_cost_usd)
        imm = float(a.immediate.cloud_cost_usd)
        regret = usd / b_usd - 1 if b_usd else (0.0 if usd == 0 else math.inf)
        ok = regret <= 0.05 and usd <= imm
        print(f"| {name} | {model} | {est} | {gpus} | ${usd / 1e3:,.1f}k / "
              f"{a.result.avg_jct_s:,.0f} | {best.policy} ${b_usd / 1e3:,.1f}k | "
              f"${imm / 1e3:,.1f}k | {regret:+.1%} | {'yes' if ok else 'no'} |",
              flush=True)  # fmt: skip
        records.append({"trace": name, "model": model, "estimate": est, "onprem_gpus": gpus,
                        "adaptive_usd": round(usd), "adaptive_jct_s": round(a.result.avg_jct_s),
                        "best_fixed": best.policy, "best_fixed_usd": round(b_usd),
                        "immediate_usd": round(imm), "regret_vs_best": round(regret, 4),
                        "ok": ok, "wall_s": round(time.perf_counter() - t0, 1)})  # fmt: skip
    met = sum(bool(r["ok"]) for r in records)
    print(f"rows {len(records)}: within best + 5% and <= immediate on {met}")
    print(json.dumps({"sweep": records, "met": met}))


def merge(files: list[str]) -> None:
    """The parts' records (each file's last line), summed up per estimate and per trace."""
    records: list[dict[str, object]] = []
    for f in files:
        records += json.loads(Path(f).read_text().strip().splitlines()[-1])["sweep"]
    order = {row: k for k, row in enumerate(_all_rows())}

    def place(r: dict[str, object]) -> int:
        return order.get((str(r["trace"]), str(r["model"]), str(r["estimate"]), int(r["onprem_gpus"])), 0)  # type: ignore[call-overload]  # noqa: E501  # fmt: skip

    records.sort(key=place)
    for key in ("estimate", "trace", "model", "onprem_gpus"):
        groups: dict[object, list[dict[str, object]]] = {}
        for r in records:
            groups.setdefault(r[key], []).append(r)
        for k, rs in groups.items():
            ok = sum(bool(r["ok"]) for r in rs)
            imm = sum(int(r["adaptive_usd"]) <= int(r["immediate_usd"]) for r in rs)  # type: ignore[call-overload]
            print(f"{key} {k}: rows {len(rs)}, <= immediate {imm}, within best + 5% "
                  f"and <= immediate {ok}")  # fmt: skip
    misses = [
        f"{r['trace']} {r['model']} {r['estimate']} {r['onprem_gpus']}: "
        f"{float(r['regret_vs_best']):+.1%} on best ${int(r['best_fixed_usd']) / 1e3:,.1f}k"  # type: ignore[arg-type, call-overload]
        for r in records
        if not r["ok"]
    ]
    met = len(records) - len(misses)
    print(f"rows {len(records)}: within best + 5% and <= immediate on {met}; misses: {misses}")
    print(json.dumps({"sweep": records, "met": met}))


if __name__ == "__main__":
    main()
