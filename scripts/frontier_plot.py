"""Cost against JCT on the four Philly rows, one PNG: every fixed candidate, `adaptive` and
`immediate` under each estimate mode (seed 0 of bench/adaptive.py's results), with Starburst's
published points (its exact and no-estimate policies, from bench/robustness.py).

Usage: python scripts/frontier_plot.py bench/results/adaptive.txt docs/img/simulator/frontier.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from robustness import STARBURST  # noqa: E402

COLOURS = {
    "none": "#1f77b4",
    "history": "#2ca02c",
    "limits": "#9467bd",
    "history+limits": "#d62728",
}
MARKERS = {
    "default": "o",
    "per-gpu-1386": "v",
    "per-gpu-2000": "^",
    "unsure-floor-4x": "s",
    "unsure-floor-2x": "D",
    "learned-floor": "d",
    "limit-worst-10x": "P",
    "limit-worst-3000x": "h",
    "limit-hedged": "p",
    "budget-timeout": "X",
}


def main() -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    data = json.loads([ln for ln in src.read_text().splitlines() if ln.startswith("{")][-1])
    rows = [r for r in data["rows"] if r["seed"] == 0]
    fig, axes = plt.subplots(2, 2, figsize=(13, 10))
    for ax, gpus in zip(axes.flat, (256, 384, 512, 768), strict=True):
        for r in (r for r in rows if r["onprem_gpus"] == gpus):
            c = COLOURS[r["estimate"]]
            for name, (usd, jct) in r["candidates"].items():
                ax.scatter(jct, usd / 1e3, c=c, marker=MARKERS.get(name, "o"), s=28, alpha=0.55)
            ax.scatter(r["adaptive_jct_s"], r["adaptive_usd"] / 1e3, c=c, marker="*", s=220,
                       edgecolors="black", linewidths=0.8, zorder=3)  # fmt: skip
        imm = next(r for r in rows if r["onprem_gpus"] == gpus)
        ax.scatter(imm["immediate_jct_s"], imm["immediate_usd"] / 1e3, c="grey", marker="|",
                   s=300, label="immediate")  # fmt: skip
        for kind, mark in (("exact", ">"), ("none", "<")):
            usd, jct = STARBURST[gpus][kind]
            ax.scatter(jct, usd / 1e3, c="black", marker=mark, s=90, zorder=4)
            ax.annotate(f"Starburst {kind}", (jct, usd / 1e3), textcoords="offset points",
                        xytext=(6, 4), fontsize=8)  # fmt: skip
        ax.set_title(f"{gpus} on-prem GPUs")
        lo, hi = ax.get_xlim()
        if hi / lo > 1.5:  # --estimate limits waits far longer than the rest
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ticks = (10_000, 11_000, 12_000, 13_000, 15_000, 20_000, 40_000, 80_000)
            if hi / lo > 4:  # the ticks between 10,000 and 15,000 would print over each other
                ticks = (10_000, 15_000, 20_000, 40_000, 80_000)
            ax.set_xticks([t for t in ticks if lo <= t <= hi])
            ax.set_xlim(lo, hi)
            ax.set_xlabel("average JCT (s, log scale)")
        else:
            ax.set_xlabel("average JCT (s)")
        ax.set_ylabel(r"cloud \$ (thousands)")
        ax.grid(alpha=0.3)
    handles = [
        plt.Line2D([], [], color=c, marker="o", ls="", label=f"--estimate {e}")
        for e, c in COLOURS.items()
    ]
    handles += [
        plt.Line2D([], [], color="grey", marker=m, ls="", label=n) for n, m in MARKERS.items()
    ]
    handles.append(plt.Line2D([], [], color="grey", marker="*", ms=14, ls="", label="adaptive"))
    handles.append(plt.Line2D([], [], color="black", marker=">", ls="", label="Starburst"))
    fig.legend(handles=handles, loc="lower center", ncol=7, fontsize=8)
    fig.suptitle(r"Philly trace, published model (\$4.10/GPU-h, boot 0): cloud \$ against JCT")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    print(out)


if __name__ == "__main__":
    main()
