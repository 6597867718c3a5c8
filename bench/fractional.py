"""Fractional jobs packed on MIG slices against the round-up baseline, on the bundled Philly
trace's fractional variant (data/traces/README.md), published model: $4.10/GPU-h, boot 0, and
cloud nodes of 8 GPUs billed whole (--cloud-node-gpus 8) in every mode.

Rows: 256 and 512 on-prem GPUs, policy `default`, estimate exact:
- pack: each fractional job takes its MIG profile's slices, on-prem and on shared cloud nodes;
- round-up: each takes a whole GPU, on the same MIG GPUs and shared nodes (only packing differs);
- today: the whole-GPU trace (the fractional jobs as one-GPU jobs, planned as today: no MIG GPUs
  on-prem, no node shared across planning passes), for reference.

Target (issue 32): pack <= 0.75x round-up's cloud dollars at a JCT no higher.
Last line: one JSON object with each row's figures and the ratios.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.config import load_policy  # noqa: E402
from provisioner.simulate.engine import SimResult, SimSettings, flat_catalog, simulate  # noqa: E402
from provisioner.simulate.trace import TraceJob, load_trace  # noqa: E402

TRACES = ROOT / "data" / "traces"
GPUS = (256, 512)
TARGET = 0.75


def run(jobs: Sequence[TraceJob], gpus: int, mode: Literal["pack", "round-up"]) -> SimResult:
    policy = load_policy(ROOT / "policies")
    catalog = flat_catalog(Decimal("4.10"), policy.onprem.gpu_model, [8])
    settings = SimSettings(
        onprem_gpus=gpus, gpus_per_node=8, boot_s=0.0, billing_min_s=0.0, fractional=mode
    )
    return simulate(jobs, settings, policy, catalog, "default")


def figures(r: SimResult) -> dict[str, float]:
    return {
        "cloud_usd": round(float(r.cloud_cost_usd), 2),
        "fractional_cloud_usd": round(float(r.cloud_mig_usd), 2),
        "avg_jct_s": round(r.avg_jct_s, 1),
        "onprem_util": round(r.onprem_gpu_utilization, 4),
        "cloud_mig_nodes": r.cloud_mig_nodes,
        "mig_gpus": r.mig_gpus,
        "wall_s": round(r.wall_s, 2),
    }


def main() -> None:
    frac = load_trace(TRACES / "philly_2017-10-02_4w_fractional.csv.gz")
    whole = load_trace(TRACES / "philly_2017-10-02_4w.csv.gz")
    out: dict[str, object] = {"fractional_jobs": sum(j.fractional for j in frac)}
    print(f"{out['fractional_jobs']} of {len(frac)} jobs fractional; 8-GPU nodes at $4.10/GPU-h")
    print(f"{'GPUs':>5} {'mode':>9} {'cloud $':>12} {'fractional $':>13} {'JCT s':>8} {'util':>6}")
    for gpus in GPUS:
        rows = {
            "pack": figures(run(frac, gpus, "pack")),
            "round-up": figures(run(frac, gpus, "round-up")),
            "today": figures(run(whole, gpus, "pack")),
        }
        for mode, f in rows.items():
            print(
                f"{gpus:>5} {mode:>9} {f['cloud_usd']:>12,.0f} {f['fractional_cloud_usd']:>13,.0f}"
                f" {f['avg_jct_s']:>8,.0f} {f['onprem_util']:>6.1%}"
            )
        pack, up, today = rows["pack"], rows["round-up"], rows["today"]
        ratio = pack["cloud_usd"] / up["cloud_usd"]
        frac_ratio = pack["fractional_cloud_usd"] / up["fractional_cloud_usd"]
        met = ratio <= TARGET and pack["avg_jct_s"] <= up["avg_jct_s"]
        print(
            f"  {gpus}: pack/round-up cloud $ {ratio:.3f}x (target <= {TARGET}x: "
            f"{'met' if met else 'missed'}), fractional jobs' own $ {frac_ratio:.3f}x, "
            f"JCT {pack['avg_jct_s'] / up['avg_jct_s']:.4f}x; "
            f"pack/today {pack['cloud_usd'] / today['cloud_usd']:.3f}x"
        )
        out[str(gpus)] = rows | {
            "pack_over_round_up": round(ratio, 4),
            "fractional_pack_over_round_up": round(frac_ratio, 4),
            "jct_pack_over_round_up": round(pack["avg_jct_s"] / up["avg_jct_s"], 4),
            "pack_over_today": round(pack["cloud_usd"] / today["cloud_usd"], 4),
            "target_met": met,
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
