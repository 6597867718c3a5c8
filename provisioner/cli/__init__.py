"""The `provisioner` command. Heavy modules are imported inside commands so `--help` stays fast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from provisioner.cli.common import (
    DEFAULT_POLICIES,
    JsonFlag,
    PoliciesOpt,
    echo_json,
    friendly_errors,
)

app = typer.Typer(
    name="provisioner",
    help="Hybrid GPU burst provisioner: Slurm on-prem, cost-aware cloud bursting, FinOps.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.command()
@friendly_errors
def validate(policies: PoliciesOpt = DEFAULT_POLICIES, as_json: JsonFlag = False) -> None:
    """Validate the policy files and print a summary."""
    from provisioner.config import load_policy
    from provisioner.shown_paths import display_path

    policy = load_policy(policies)
    named = "controller" in policy.model_fields_set
    shown = display_path(policies)
    if as_json:
        echo_json(
            {
                "policies": shown,
                "ok": True,
                "controller": policy.controller if named else None,
                "pools": [p.name for p in policy.pools],
                "team_budgets": sorted(policy.budgets.teams),
            }
        )
        return
    who = f"controller {policy.controller}" if named else "controller: the store's own identity"
    typer.echo(
        f"{shown}: ok ({who}, {len(policy.pools)} pools, {len(policy.budgets.teams)} team budgets)"
    )


@app.command()
@friendly_errors
def plan(
    snapshot: Annotated[Path, typer.Option("--snapshot", help="Snapshot JSON file.")],
    policies: PoliciesOpt = DEFAULT_POLICIES,
    catalog: Annotated[Path | None, typer.Option(help="Offer catalog CSV.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Plan one pass from a snapshot file and print the decisions."""
    from provisioner.config import load_policy
    from provisioner.plan.backoff import Backoff
    from provisioner.plan.catalog import load_catalog
    from provisioner.plan.explain import plan_table, plan_to_json
    from provisioner.plan.planner import plan as make_plan
    from provisioner.plan.snapshot_io import load_snapshot

    policy = load_policy(policies)
    snap = load_snapshot(snapshot)
    result = make_plan(snap, policy, load_catalog(catalog), Backoff(), snap.taken_ts)
    if as_json:
        typer.echo(plan_to_json(result))
    else:
        plan_table(result)


# Sub-command groups owned by other modules are registered here, one line each.
def _register_subcommands() -> None:
    from provisioner.cli.simulate import register as register_simulate

    register_simulate(app)
    from provisioner.agent.cli import register as register_agent; register_agent(app)  # noqa: E702, I001  # fmt: skip
    from provisioner.cli.slurm_hooks import register as register_slurm; register_slurm(app)  # noqa: E702, I001  # fmt: skip
    from provisioner.cli.controller import register as register_controller; register_controller(app)  # noqa: E702, I001  # fmt: skip
    from provisioner.cli.iac import register as register_iac; register_iac(app)  # noqa: E702, I001  # fmt: skip
    from provisioner.cli.reports import register as register_reports; register_reports(app)  # noqa: E702, I001  # fmt: skip


_register_subcommands()


def main() -> None:  # pragma: no cover - console entry
    app()
