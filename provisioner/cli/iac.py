"""`provisioner iac review`: the burst pools of policies/ as a priced, policy-checked plan.

Exit status: 0 when no mandatory policy fails, 1 when one does, 2 for bad input (a policy file,
the catalog, the policy config, a base ref), with one line naming the file and field.
"""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from provisioner.cli.common import DEFAULT_POLICIES, friendly_errors


class Format(StrEnum):
    markdown = "markdown"
    json = "json"


def _expected_use(value: float) -> Decimal:
    from provisioner.domain.errors import InputError

    if not 0 <= value <= 1:
        raise InputError(f"--expected-use: {value} is not a fraction between 0 and 1")
    return Decimal(str(value))


def register(app: typer.Typer) -> None:
    iac = typer.Typer(
        name="iac",
        help="Infrastructure-as-code reviews of the burst pools.",
        no_args_is_help=True,
    )

    @iac.command()
    @friendly_errors
    def review(
        base: Annotated[
            str | None,
            typer.Option(
                "--base",
                help="Git ref to compare with (default: HEAD when policies/ is in a git "
                "work tree, else nothing).",
            ),
        ] = None,
        base_dir: Annotated[
            Path | None,
            typer.Option("--base-dir", help="A policies/ directory to compare with (not git)."),
        ] = None,
        policies: Annotated[
            Path, typer.Option("--policies", help="The policies/ directory under review.")
        ] = DEFAULT_POLICIES,
        fmt: Annotated[Format, typer.Option("--format", help="Report format.")] = Format.markdown,
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
        expected_use: Annotated[
            float,
            typer.Option(
                "--expected-use",
                help="Busy fraction for the expected $/month of pools that declare none.",
            ),
        ] = 0.25,
        catalog: Annotated[Path | None, typer.Option(help="Offer catalog CSV.")] = None,
        policy_pack: Annotated[
            Path | None, typer.Option("--policy-pack", help="CrossGuard pack directory.")
        ] = None,
        policy_config: Annotated[
            Path | None,
            typer.Option(
                "--policy-config", help="Policy pack config JSON (as --policy-pack-config)."
            ),
        ] = None,
        backend: Annotated[
            str | None,
            typer.Option(
                "--backend",
                envvar="PULUMI_BACKEND_URL",
                help="Pulumi backend: with the pulumi CLI installed, also preview every group.",
            ),
        ] = None,
        store: Annotated[
            str | None,
            typer.Option(
                "--store",
                envvar="PROVISIONER_STORE_URL",
                help="The controller's store: its identity names the groups of policies that "
                "name no controller (read only).",
            ),
        ] = None,
    ) -> None:
        """Render, diff, price and policy-check the pools; Markdown for a PR comment, or JSON."""
        from provisioner.doctor import stored_controller
        from provisioner.iac.report import to_json, to_markdown
        from provisioner.iac.review import review_working_tree

        result = review_working_tree(
            policies,
            base_ref=base,
            base_dir=base_dir,
            catalog=catalog,
            expected_use=_expected_use(expected_use),
            policy_pack=policy_pack,
            policy_config=policy_config,
            backend=backend,
            controller=stored_controller(store) if store else "",
        )
        data = result.to_dict()
        fmt = Format.json if as_json else fmt
        typer.echo(to_json(data) if fmt is Format.json else to_markdown(data), nl=False)
        if fmt is Format.json:
            typer.echo("")
        raise typer.Exit(result.exit_code)

    app.add_typer(iac)
