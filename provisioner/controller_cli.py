"""`provisioner run`, `provisioner demo` and `provisioner token create`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def register(app: typer.Typer) -> None:
    from provisioner.cli import friendly_errors

    @app.command()
    @friendly_errors
    def run(
        policies: Annotated[
            Path | None, typer.Option("--policies", help="Policy directory or file.")
        ] = None,
        store_url: Annotated[
            str | None, typer.Option("--store", help="SQLAlchemy URL of the store.")
        ] = None,
        host: Annotated[str | None, typer.Option("--host", help="API bind address.")] = None,
        port: Annotated[int | None, typer.Option("--port", help="API port.")] = None,
        tick: Annotated[
            float | None, typer.Option("--tick", help="Seconds between reconcile passes.")
        ] = None,
        passes: Annotated[
            int | None, typer.Option("--passes", help="Stop after this many passes.")
        ] = None,
        verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    ) -> None:
        """Run the controller: the reconcile loop on a tick plus the HTTP API, in one process.

        Settings come from PROVISIONER_* environment variables (see docs/controller.md); the
        options override them. SIGTERM or Ctrl-C lets the current pass finish, then exits."""
        from provisioner.bootstrap import build_controller, load_settings, serve

        _logging(verbose)
        settings = load_settings(
            policies=policies, store_url=store_url, api_host=host, api_port=port, tick_s=tick
        )
        controller = build_controller(settings)

        def started(url: str) -> None:
            typer.echo(
                f"controller {controller.policy.controller}: API on {url}, a pass every "
                f"{settings.tick_s:g} s (slurm: {settings.slurm_mode}, store: "
                f"{settings.store_url})",
                err=True,
            )

        n = serve(controller, on_started=started, max_passes=passes)
        typer.echo(f"stopped after {n} pass(es)", err=True)

    @app.command()
    @friendly_errors
    def demo(
        port: Annotated[int, typer.Option("--port", help="API port (0: any free port).")] = 8000,
        speed: Annotated[
            float, typer.Option("--speed", min=1.0, help="Simulated seconds per wall second.")
        ] = 120.0,
        duration: Annotated[
            float | None,
            typer.Option("--duration", min=1.0, help="Stop after this many wall seconds."),
        ] = None,
        tick: Annotated[
            float, typer.Option("--tick", min=0.05, help="Wall seconds between passes.")
        ] = 0.5,
        onprem_nodes: Annotated[
            int, typer.Option("--onprem-nodes", min=1, help="On-prem nodes (8 GPUs each).")
        ] = 4,
        start_hour: Annotated[
            float, typer.Option("--start-hour", min=0.0, help="Trace hour the replay starts.")
        ] = 12.0,
        data_dir: Annotated[
            Path, typer.Option("--data-dir", help="Where the demo's SQLite store goes.")
        ] = Path(".demo"),
        verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    ) -> None:
        """The controller end to end with no cloud account and no Slurm: moto as AWS, a FAKE
        in-memory on-prem cluster replaying the Philly trace, the real loop and API."""
        from provisioner.demo.runner import DemoOptions, run_demo

        _logging(verbose)
        try:
            run_demo(
                DemoOptions(
                    port=port,
                    speed=speed,
                    duration_s=duration,
                    tick_s=tick,
                    onprem_nodes=onprem_nodes,
                    start_hour=start_hour,
                    data_dir=data_dir,
                )
            )
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)

    token = typer.Typer(name="token", help="API bearer tokens.", no_args_is_help=True)

    @token.command("create")
    @friendly_errors
    def token_create(
        role: Annotated[str, typer.Option("--role", help="viewer, operator or admin.")],
        name: Annotated[str, typer.Option("--name", help="Who or what uses it.")],
        store_url: Annotated[
            str | None, typer.Option("--store", help="SQLAlchemy URL of the store.")
        ] = None,
    ) -> None:
        """Create a token and print it once (only a salted hash is stored)."""
        from provisioner.api.auth import Role, create_token
        from provisioner.bootstrap import load_settings
        from provisioner.clock import SystemClock
        from provisioner.domain.errors import InputError
        from provisioner.reconcile.store import Store

        try:
            r = Role.parse(role)
        except ValueError as exc:
            raise InputError(f"--role: {exc}") from None
        if not name.strip():
            raise InputError("--name: must not be empty")
        settings = load_settings(store_url=store_url)
        store = Store(settings.store_url)
        try:
            secret = create_token(store, r, name.strip(), SystemClock().now().timestamp())
        finally:
            store.close()
        typer.echo(secret)
        typer.echo(f"{r.label} token {name.strip()!r} created; shown only this once", err=True)

    app.add_typer(token, name="token")
