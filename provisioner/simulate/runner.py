"""Runs several policies over one trace, prints the comparison, writes JSON and a plot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from provisioner.domain.errors import InputError
from provisioner.simulate.adaptive import AdaptiveResult
from provisioner.simulate.engine import SimResult, SimSettings, _parse_policy, flat_catalog
from provisioner.simulate.trace import TraceJob


@dataclass(frozen=True)
class SimulationRequest:
    trace: Path
    onprem_gpus: int
    gpus_per_node: int
    policies: tuple[str, ...]
    catalog: Path | None
    price_per_gpu_hour: float | None
    boot_seconds: float
    estimate: str
    policy_path: Path
    spot_interruptions: bool = False
    seed: int = 7
    json_out: Path | None = None
    plot: Path | None = None
    progress: bool = True
    max_limit_s: float | None = None
    fractional: str = "pack"
    mig_gpus: int | None = None
    cloud_node_gpus: int | None = None


ESTIMATES = ("exact", "none", "history", "limits", "history+limits")
ADAPTIVE = "adaptive"
FRACTIONAL_MODES = ("pack", "round-up")


def _check(req: SimulationRequest) -> None:
    if req.onprem_gpus < 0:
        raise InputError("--onprem-gpus: must be >= 0")
    if req.gpus_per_node < 1:
        raise InputError("--gpus-per-node: must be >= 1")
    if req.boot_seconds < 0:
        raise InputError("--boot-seconds: must be >= 0")
    if req.estimate not in ESTIMATES:
        raise InputError(f"--estimate: must be one of {', '.join(ESTIMATES)}, got {req.estimate!r}")
    if req.max_limit_s is not None and req.max_limit_s < 3600:
        raise InputError("--max-limit: the largest time limit must be at least 3600 s")
    if req.price_per_gpu_hour is not None and req.price_per_gpu_hour <= 0:
        raise InputError("--price-per-gpu-hour: must be > 0")
    if req.fractional not in FRACTIONAL_MODES:
        raise InputError(f"--fractional: must be pack or round-up, got {req.fractional!r}")
    if req.cloud_node_gpus is not None:
        if req.price_per_gpu_hour is None:
            raise InputError("--cloud-node-gpus: needs --price-per-gpu-hour (a flat catalog)")
        if req.cloud_node_gpus < 1:
            raise InputError("--cloud-node-gpus: must be >= 1")
    for p in req.policies:
        if p == ADAPTIVE:
            continue
        try:
            _parse_policy(p)
        except ValueError as exc:
            raise InputError(f"--policy: {exc}") from None


def run_simulations(req: SimulationRequest) -> list[SimResult]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from provisioner.config import load_policy
    from provisioner.plan.catalog import load_catalog
    from provisioner.simulate.adaptive import simulate_adaptive
    from provisioner.simulate.engine import simulate
    from provisioner.simulate.trace import load_trace

    _check(req)
    policy = load_policy(req.policy_path)
    jobs = load_trace(req.trace)
    if not jobs:
        raise InputError(f"{req.trace}: no jobs")
    if req.price_per_gpu_hour is not None:
        # Whole nodes of one size, or one node size per job size (fractional jobs' MIG nodes
        # have the on-prem node's GPUs).
        sizes = {j.gpus for j in jobs} | ({req.gpus_per_node} if any_fractional(jobs) else set())
        catalog = flat_catalog(
            Decimal(repr(req.price_per_gpu_hour)),
            policy.onprem.gpu_model,
            sorted(sizes) if req.cloud_node_gpus is None else [req.cloud_node_gpus],
        )
    else:
        catalog = load_catalog(req.catalog)
    settings = SimSettings(
        onprem_gpus=req.onprem_gpus,
        gpus_per_node=req.gpus_per_node,
        boot_s=req.boot_seconds,
        estimate=req.estimate,  # type: ignore[arg-type]
        spot_interruptions=req.spot_interruptions,
        seed=req.seed,
        max_limit_s=req.max_limit_s,
        fractional=req.fractional,  # type: ignore[arg-type]
        mig_gpus=req.mig_gpus,
        # The published model bills per GPU-second with no minimum; clouds bill 60 s at least.
        billing_min_s=0.0 if req.price_per_gpu_hour is not None else 60.0,
    )
    console = Console(stderr=True)
    results: list[SimResult] = []
    adaptive: AdaptiveResult | None = None
    for name in req.policies:
        with Progress(
            TextColumn(f"[bold]{name:>16}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} jobs"),
            TimeRemainingColumn(),
            console=console,
            disable=not req.progress,
            transient=True,
        ) as bar:
            task = bar.add_task(name, total=len(jobs))
            tick = lambda k, t=task: bar.advance(t, k)  # type: ignore[misc]  # noqa: E731
            if name == ADAPTIVE:
                adaptive = simulate_adaptive(jobs, settings, policy, catalog, tick=tick)
                results.append(adaptive.result)
            else:
                results.append(simulate(jobs, settings, policy, catalog, name, tick=tick))
    print_table(results, req, catalog.source, len(jobs))
    if adaptive is not None:
        print_adaptive(adaptive, policy.selection.jct_bound)
    if req.json_out is not None:
        req.json_out.parent.mkdir(parents=True, exist_ok=True)
        out = [
            adaptive.to_dict(policy.selection.jct_bound)
            if adaptive is not None and r is adaptive.result
            else r.to_dict()
            for r in results
        ]
        req.json_out.write_text(json.dumps(out, indent=2) + "\n")
    if req.plot is not None:
        from provisioner.simulate.plot import plot_results

        plot_results(results, jobs, req.plot, req.onprem_gpus)
    return results


def print_table(results: list[SimResult], req: SimulationRequest, source: str, n: int) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=(
            f"{n} jobs, {req.onprem_gpus} on-prem GPUs ({req.gpus_per_node}/node), "
            f"boot {req.boot_seconds:.0f}s, estimate {req.estimate}, prices: {source}"
            + _fractional_title(results)
        )
    )
    for col in (
        "policy",
        "cloud $",
        "cloud GPU-h",
        "on-prem util",
        "avg JCT s",
        "avg wait s",
        "p95 wait s",
        "p99 wait s",
        "max wait s",
        "burst %",
        "regret $",
        "wall s",
    ):
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(
            r.policy,
            f"{r.cloud_cost_usd:,.0f}",
            f"{r.cloud_gpu_hours:,.0f}",
            f"{r.onprem_gpu_utilization:.1%}",
            f"{r.avg_jct_s:,.0f}",
            f"{r.avg_wait_s:,.0f}",
            f"{r.p95_wait_s:,.0f}",
            f"{r.p99_wait_s:,.0f}",
            f"{r.max_wait_s:,.0f}",
            f"{r.burst_fraction:.1%}",
            f"{r.regret_usd:,.0f}",
            f"{r.wall_s:.1f}",
        )
    Console(width=max(150, Console().width)).print(t)


def print_adaptive(a: AdaptiveResult, jct_bound: float) -> None:
    """The adaptive run's switches, and its regret against the best fixed candidate."""
    from rich.console import Console

    con = Console(width=max(150, Console().width))
    best = a.best_fixed(jct_bound)
    regret = a.result.cloud_cost_usd - best.cloud_cost_usd
    con.print(
        f"adaptive: {len(a.choices)} rounds, {sum(c.switched for c in a.choices)} switches; "
        f"best fixed candidate in hindsight (JCT within {jct_bound:g}x immediate's "
        f"{a.immediate.avg_jct_s:,.0f} s): {best.policy} ${best.cloud_cost_usd:,.0f}, "
        f"JCT {best.avg_jct_s:,.0f} s; adaptive ${a.result.cloud_cost_usd:,.0f}, "
        f"JCT {a.result.avg_jct_s:,.0f} s; regret ${regret:,.0f} "
        f"({float(regret / best.cloud_cost_usd) if best.cloud_cost_usd else 0.0:+.1%})"
    )
    for r in a.candidates:
        con.print(f"  candidate {r.policy:>16}: ${r.cloud_cost_usd:,.0f}, JCT {r.avg_jct_s:,.0f} s")
    for c in a.choices:
        if c.switched:
            con.print(f"  day {(c.at - a.origin) / 86400:.1f}: {c.why}")


def any_fractional(jobs: Sequence[TraceJob]) -> bool:
    return any(j.fractional for j in jobs)


def _fractional_title(results: list[SimResult]) -> str:
    r = next((r for r in results if r.fractional_jobs), None)
    if r is None:
        return ""
    return (
        f"; {r.fractional_jobs} fractional jobs, {r.fractional_mode}, "
        f"{r.mig_gpus} on-prem GPUs MIG-partitioned"
    )
