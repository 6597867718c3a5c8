"""`provisioner simulate` and `provisioner demo`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from provisioner.cli.common import DEFAULT_POLICIES, DEFAULT_TRACE, friendly_errors


def register(app: typer.Typer) -> None:
    @app.command()
    @friendly_errors
    def simulate(
        trace: Annotated[Path, typer.Option(help="Trace CSV (optionally .gz).")] = DEFAULT_TRACE,
        onprem_gpus: Annotated[int, typer.Option(help="On-prem GPUs in total.")] = 256,
        gpus_per_node: Annotated[int, typer.Option(help="GPUs per on-prem node.")] = 8,
        policy: Annotated[
            list[str] | None,
            typer.Option(
                help="default | never | immediate | budget-timeout | fixed-wait:SECONDS | "
                "adaptive (chosen from the past as the trace replays; repeatable)"
            ),
        ] = None,
        catalog: Annotated[Path | None, typer.Option(help="Offer catalog CSV.")] = None,
        price_per_gpu_hour: Annotated[
            float | None, typer.Option(help="Flat on-demand $/GPU-h instead of the catalog.")
        ] = None,
        boot_seconds: Annotated[float, typer.Option(help="Cloud boot delay.")] = 300.0,
        estimate: Annotated[
            str,
            typer.Option(
                help="Runtime knowledge: exact | none | history (learned from jobs that ended) "
                "| limits (time limits drawn from the published model of user estimates) "
                "| history+limits (learned, never beyond the limit)."
            ),
        ] = "exact",
        max_limit: Annotated[
            float | None,
            typer.Option(
                "--max-limit",
                help="Largest time limit (s) for --estimate limits (default: the trace's "
                "longest runtime rounded up to a day).",
            ),
        ] = None,
        policies: Annotated[Path, typer.Option(help="Policy file or dir.")] = DEFAULT_POLICIES,
        spot_interruptions: Annotated[
            bool, typer.Option(help="Model spot interruptions with rework.")
        ] = False,
        seed: Annotated[int, typer.Option(help="Seed for spot interruptions.")] = 7,
        json_out: Annotated[Path | None, typer.Option("--json", help="Write results JSON.")] = None,
        plot: Annotated[Path | None, typer.Option(help="Write a PNG plot.")] = None,
        progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
        fractional: Annotated[
            str,
            typer.Option(
                help="Jobs with a share of a GPU (trace column gpu_milli): pack (the slices of "
                "their MIG profile) | round-up (a whole GPU each, the baseline)."
            ),
        ] = "pack",
        mig_gpus: Annotated[
            int | None,
            typer.Option(
                help="On-prem GPUs MIG-partitioned for fractional jobs (default: their share "
                "of the trace's GPU time)."
            ),
        ] = None,
        cloud_node_gpus: Annotated[
            int | None,
            typer.Option(
                help="With --price-per-gpu-hour: cloud nodes of this many GPUs only, billed "
                "whole (default: a node of each job's size)."
            ),
        ] = None,
    ) -> None:
        """Replay a GPU job trace through the real planner and compare burst policies."""
        from provisioner.simulate.runner import SimulationRequest, run_simulations

        run_simulations(
            SimulationRequest(
                trace=trace,
                onprem_gpus=onprem_gpus,
                gpus_per_node=gpus_per_node,
                policies=tuple(policy or ("default", "never", "immediate")),
                catalog=catalog,
                price_per_gpu_hour=price_per_gpu_hour,
                boot_seconds=boot_seconds,
                estimate=estimate,
                policy_path=policies,
                spot_interruptions=spot_interruptions,
                seed=seed,
                json_out=json_out,
                plot=plot,
                progress=progress,
                max_limit_s=max_limit,
                fractional=fractional,
                mig_gpus=mig_gpus,
                cloud_node_gpus=cloud_node_gpus,
            )
        )
