"""PNG plots of a simulation: cost and wait per policy, GPU demand over time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from provisioner.simulate.engine import SimResult
from provisioner.simulate.trace import TraceJob


def demand_series(
    jobs: Sequence[TraceJob], step_s: float = 3600.0
) -> tuple[list[float], list[float]]:
    """Hourly GPU demand if every job started at submit (a sweep line)."""
    if not jobs:
        return [], []
    end = max(j.submit_s + j.duration_s for j in jobs)
    bins = int(end // step_s) + 1
    delta = [0.0] * (bins + 1)
    for j in jobs:
        a, b = j.submit_s / step_s, (j.submit_s + j.duration_s) / step_s
        ia, ib = int(a), int(b)
        if ia == ib:
            delta[ia] += j.gpus * (b - a)
        else:
            delta[ia] += j.gpus * (ia + 1 - a)
            for k in range(ia + 1, ib):
                delta[k] += j.gpus
            delta[ib] += j.gpus * (b - ib)
    xs = [k * step_s / 86400.0 for k in range(bins)]
    return xs, delta[:bins]


def plot_results(
    results: Sequence[SimResult], jobs: Sequence[TraceJob], out: Path, onprem_gpus: int = 0
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    names = [r.policy for r in results]
    axes[0].bar(names, [float(r.cloud_cost_usd) for r in results], color="tab:blue")
    axes[0].set_title("Cloud cost (USD)")
    axes[0].tick_params(axis="x", rotation=30)
    x = range(len(results))
    axes[1].bar([i - 0.2 for i in x], [r.avg_wait_s / 3600 for r in results], 0.4, label="avg")
    axes[1].bar([i + 0.2 for i in x], [r.p95_wait_s / 3600 for r in results], 0.4, label="p95")
    axes[1].set_xticks(list(x), names, rotation=30)
    axes[1].set_title("Wait (hours, log scale)")
    axes[1].set_yscale("symlog", linthresh=0.1)
    axes[1].legend()
    xs, ys = demand_series(jobs)
    axes[2].plot(xs, ys, lw=0.8, label="demand")
    if onprem_gpus:
        axes[2].axhline(onprem_gpus, color="tab:red", ls="--", lw=1, label="on-prem GPUs")
        axes[2].legend()
    axes[2].set_title("GPU demand if all jobs started at submit")
    axes[2].set_xlabel("day")
    axes[2].set_ylabel("GPUs")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
