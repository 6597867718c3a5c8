"""What every `provisioner` subcommand module shares: the error wrapper and the default inputs.

Subcommand modules import this, never the `provisioner.cli` package that registers them, so the
CLI has no import loop (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from provisioner import data_files
from provisioner.domain.errors import ConfigError, InputError, ProvisionerError

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_POLICIES = data_files.policies_dir()
DEFAULT_TRACE = data_files.sample_trace()


def friendly_errors(fn: F) -> F:
    """Bad input: one clear line naming the file and field, exit code 2, no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ConfigError, InputError) as exc:
            typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None
        except ProvisionerError as exc:
            typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


PoliciesOpt = Annotated[
    Path, typer.Option("--policies", help="Policy file or policies/ directory.")
]


JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON, for scripts.")]


def echo_json(data: Any) -> None:
    import json

    typer.echo(json.dumps(data, indent=2, default=str))
