"""The time limit as a worst case (`limit_worst_case_ratio` R), and a limit alone as a guess
(`hedge_limits`), on the bundled Philly trace in the published model ($4.10/GPU-h, boot 0).

Rows: 256, 384, 512 and 768 on-prem GPUs, `--estimate history+limits` (limits from the
published model of user estimates, seed 7), the trace as is, one run each. Columns: `default`
(R off), R = 3, 10, 30, 100, 1000 and 3000, `hedge_limits` alone, and Starburst's no-estimate
figures; each as cloud dollars and average JCT. docs/simulator.md, "The time limit as a worst case".
Last line: one JSON object, one record per row.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from robustness import STARBURST  # noqa: E402

from provisioner.config import load_policy  # noqa: E402
from provisioner.config.models import Policy  # noqa: E402
from provisioner.plan.selection import PolicyCandidate  # noqa: E402
from provisioner.simulate.engine import SimSettings, flat_catalog, simulate  # noqa: E402
from provisioner.simulate.trace import load_trace  # noqa: E402

RATIOS = (3.0, 10.0, 30.0, 100.0, 1000.0, 3000.0)


def variants(base: Policy) -> dict[str, Policy]:
    """Column name -> the default policy with that one waiting setting changed."""
    out = {"off": base}
    for r in RATIOS:
        rule = PolicyCandidate("r", "default", (("limit_worst_case_ratio", r),))
        out[f"R = {r:g}"] = rule.policy(base)
    out["hedge_limits"] = PolicyCandidate("h", "default", (("hedge_limits", True),)).policy(base)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, nargs="*", default=[256, 384, 512, 768])
    ap.add_argument("--estimate", default="history+limits")
    args = ap.parse_args()
    policy = load_policy(ROOT / "policies")
    jobs = load_trace(ROOT / "data/traces/philly_2017-10-02_4w.csv.gz")
    catalog = flat_catalog(Decimal("4.10"), policy.onprem.gpu_model, sorted({j.gpus for j in jobs}))
    cols = variants(policy)
    print(f"| GPUs | {' | '.join(cols)} | Starburst none |")
    print(f"|---|{'---|' * len(cols)}---|")
    records = []
    for gpus in args.gpus:
        settings = SimSettings(
            gpus,
            8,
            boot_s=0.0,
            estimate=args.estimate,  # type: ignore[arg-type]
            billing_min_s=0.0,
            seed=7,
        )
        t0 = time.perf_counter()
        cells, rec = [], {"onprem_gpus": gpus, "estimate": args.estimate}
        for name, pol in cols.items():
            r = simulate(jobs, settings, pol, catalog, "default")
            usd = float(r.cloud_cost_usd)
            cells.append(f"${usd / 1e3:,.1f}k ({r.avg_jct_s:,.0f})")
            rec[name] = [round(usd), round(r.avg_jct_s)]
        sb_usd, sb_jct = STARBURST[gpus]["none"]
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        print(f"| {gpus} | {' | '.join(cells)} | ${sb_usd / 1e3:,.1f}k ({sb_jct:,}) |", flush=True)
        records.append(rec)
    print(json.dumps({"rows": records}))


if __name__ == "__main__":
    main()
