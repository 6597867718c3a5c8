"""`provisioner run`, `provisioner demo` and `provisioner token create|revoke|list`."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from provisioner.cli.common import JsonFlag, echo_json, friendly_errors


def _logging(verbose: bool, *, operator: bool = False) -> None:
    """Other libraries at WARNING. The controller's own lines at INFO for `run` (what the
    operator must see: actions, stale snapshots, errors), DEBUG with -v."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if operator:
        logging.getLogger("provisioner").setLevel(logging.DEBUG if verbose else logging.INFO)


StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="SQLAlchemy URL of the store: the same one `provisioner run` uses "
        "(default: PROVISIONER_STORE_URL, else sqlite:///provisioner.sqlite).",
    ),
]

# `provisioner demo` keeps its store at DEMO_DATA_DIR / DEMO_STORE_FILE, relative to the folder
# it runs in (`make run`: the repository root), and recreates it each time it starts
# (provisioner/demo/runner.py). `token create|list|revoke --demo` open that store.
DEMO_DATA_DIR = Path(".demo")
DEMO_STORE_FILE = "provisioner.sqlite"

DemoOpt = Annotated[
    bool,
    typer.Option(
        "--demo",
        help="Use the running demo's store (.demo/provisioner.sqlite in this folder, where "
        "`make run` keeps it) instead of --store.",
    ),
]

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 7 * 86_400.0}


def parse_duration(text: str, option: str) -> float:
    """'3600', '90m', '12h', '30d', '2w' as seconds; InputError naming `option` otherwise."""
    from provisioner.domain.errors import InputError

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    seconds = float(m.group(1)) * _UNITS[m.group(2)] if m else 0.0
    if not m or not 0 < seconds < 100 * 365 * 86_400.0:
        raise InputError(f"{option}: {text!r} is not a duration such as 3600, 90m, 12h or 30d")
    return seconds


def demo_store_path() -> Path:
    """Where `provisioner demo`, run in this folder with its defaults, keeps its store."""
    return DEMO_DATA_DIR / DEMO_STORE_FILE


def _demo_store_url(store_url: str | None) -> str:
    """`--demo`'s store as a URL; InputError when --store is given too or no demo store exists."""
    from provisioner.domain.errors import InputError

    if store_url is not None:
        raise InputError("--demo and --store: give one of them, not both")
    db = demo_store_path()
    if not db.is_file():
        raise InputError(
            f"--demo: no demo store at {db} in {Path.cwd()}: start the demo first (`make run` "
            "in this folder) and run this while it runs; the demo recreates its store each "
            "time it starts, so tokens from an earlier run are gone"
        )
    return f"sqlite:///{db}"


def _open_store(store_url: str | None, demo: bool = False) -> tuple[Any, str]:
    from sqlalchemy.engine import make_url

    from provisioner.bootstrap import load_settings
    from provisioner.store import Store

    if demo:
        store_url = _demo_store_url(store_url)
    url = load_settings(store_url=store_url).store_url
    return Store(url), make_url(url).render_as_string(hide_password=True)


def _demo_hint(demo: bool) -> str:
    """A pointer to --demo when a demo store sits here but the token went elsewhere."""
    if demo or not demo_store_path().is_file():
        return ""
    return (
        f" The demo (`make run`) uses {demo_store_path()}: for a token the running demo "
        "accepts, add --demo."
    )


def _token_state(revoked_ts: float | None, expires_ts: float | None, now: float) -> str:
    if revoked_ts is not None:
        return "revoked"
    return "expired" if expires_ts is not None and now >= expires_ts else "active"


def register(app: typer.Typer) -> None:
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
        preflight: Annotated[
            bool,
            typer.Option(
                "--preflight/--no-preflight",
                help="Run `provisioner doctor` first and refuse to start if a check fails.",
            ),
        ] = True,
        verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    ) -> None:
        """Run the controller: the reconcile loop on a tick plus the HTTP API, in one process.

        Settings come from PROVISIONER_* environment variables (see docs/controller.md); the
        options override them. SIGTERM or Ctrl-C lets the current pass finish, then exits."""
        from provisioner.bootstrap import build_controller, load_settings, serve
        from provisioner.config import load_policy
        from provisioner.doctor import raise_on_failure, run_doctor
        from provisioner.plan.catalog import load_catalog
        from provisioner.reconcile.pass_log import PassLogger

        _logging(verbose, operator=True)
        settings = load_settings(
            policies=policies, store_url=store_url, api_host=host, api_port=port, tick_s=tick
        )
        policy = load_policy(settings.policies)
        catalog = load_catalog(settings.catalog)
        if preflight:
            checks = run_doctor(settings, policy, catalog)
            for c in checks:
                if c.verdict != "ok" or verbose:
                    typer.echo(c.line(), err=True)
            raise_on_failure(checks)
        pass_log = PassLogger(
            lambda: controller.reconciler.last_snapshot, lambda: controller.reconciler.last_plan
        )
        controller = build_controller(
            settings, policy=policy, catalog=catalog, on_pass=pass_log.on_pass
        )

        def started(url: str) -> None:
            from sqlalchemy.engine import make_url

            store_shown = make_url(settings.store_url).render_as_string(hide_password=True)
            typer.echo(
                f"controller {controller.policy.controller}: API on {url}, a pass every "
                f"{settings.tick_s:g} s (slurm: {settings.slurm_mode}, store: {store_shown})",
                err=True,
            )
            now = controller.clock.now().timestamp()
            live = [
                t
                for t in controller.store.tokens()
                if t.revoked_ts is None and (t.expires_ts is None or t.expires_ts > now)
            ]
            if not live:
                # Tokens live in the store: one made against another store answers 401 here.
                typer.echo(
                    f"no API token in this store yet: provisioner token create --role viewer "
                    f"--name me --store '{store_shown}'",
                    err=True,
                )

        n = serve(controller, on_started=started, max_passes=passes)
        typer.echo(f"stopped after {n} pass(es)", err=True)

    @app.command()
    @friendly_errors
    def doctor(
        policies: Annotated[
            Path | None, typer.Option("--policies", help="Policy directory or file.")
        ] = None,
        store_url: Annotated[
            str | None, typer.Option("--store", help="SQLAlchemy URL of the store.")
        ] = None,
        as_json: JsonFlag = False,
    ) -> None:
        """Preflight: Slurm, pools against the live partitions and CLOUD nodes, clouds,
        catalog, budgets, store and API port, each with a verdict and a fix. Exit 1 if a
        mandatory check fails (`provisioner run` would refuse to start)."""
        from provisioner.bootstrap import load_settings
        from provisioner.config import load_policy
        from provisioner.doctor import run_doctor
        from provisioner.plan.catalog import load_catalog

        settings = load_settings(policies=policies, store_url=store_url)
        checks = run_doctor(
            settings, load_policy(settings.policies), load_catalog(settings.catalog)
        )
        failed = sum(c.failed for c in checks)
        if as_json:
            echo_json(
                {
                    "checks": [
                        {"name": c.name, "verdict": c.verdict, "detail": c.detail, "fix": c.fix}
                        for c in checks
                    ],
                    "failed": failed,
                }
            )
        else:
            for c in checks:
                typer.echo(c.line())
        typer.echo(f"{len(checks)} check(s), {failed} failed", err=True)
        if failed:
            raise typer.Exit(1)

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
        ] = DEMO_DATA_DIR,
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
        role: Annotated[str, typer.Option("--role", help="agent, viewer, operator or admin.")],
        name: Annotated[str, typer.Option("--name", help="Who or what uses it.")],
        node: Annotated[
            str | None,
            typer.Option("--node", help="agent tokens: the one node whose telemetry they push."),
        ] = None,
        ttl: Annotated[
            str | None,
            typer.Option("--ttl", help="Lifetime, e.g. 3600, 90m, 12h, 30d (default: none)."),
        ] = None,
        store_url: StoreOpt = None,
        demo: DemoOpt = False,
        as_json: JsonFlag = False,
    ) -> None:
        """Create a token and print it once (only a salted hash is stored).

        For the running demo (`make run`), from the same folder:
        `provisioner token create --role viewer --name me --demo`."""
        from provisioner.api.auth import Role, create_token
        from provisioner.clock import SystemClock
        from provisioner.domain.errors import InputError

        try:
            r = Role.parse(role)
        except ValueError as exc:
            raise InputError(f"--role: {exc}") from None
        if not name.strip():
            raise InputError("--name: must not be empty")
        ttl_s = parse_duration(ttl, "--ttl") if ttl is not None else None
        store, url = _open_store(store_url, demo)
        try:
            try:
                secret = create_token(
                    store, r, name.strip(), SystemClock().now().timestamp(), node=node, ttl_s=ttl_s
                )
            except ValueError as exc:
                raise InputError(f"--node/--ttl: {exc}") from None
        finally:
            store.close()
        if as_json:
            echo_json(
                {"token": secret, "token_id": secret.split("_")[1], "role": r.label,
                 "name": name.strip(), "node": node, "ttl_s": ttl_s}
            )  # fmt: skip
        else:
            typer.echo(secret)
        bound = f" for node {node!r}" if node else ""
        life = f", valid for {ttl}" if ttl else ""
        typer.echo(
            f"{r.label} token {name.strip()!r}{bound}{life} created in {url}; shown only this "
            "once. The controller accepts it only if it runs on this same store."
            + _demo_hint(demo),
            err=True,
        )

    @token.command("revoke")
    @friendly_errors
    def token_revoke(
        token_id: Annotated[str, typer.Argument(help="The token id (pbt_<id>_...), or the token.")],
        store_url: StoreOpt = None,
        demo: DemoOpt = False,
        as_json: JsonFlag = False,
    ) -> None:
        """Revoke a token: it answers 401 from the next request on."""
        from provisioner.clock import SystemClock
        from provisioner.domain.errors import InputError

        tid = token_id.split("_")[1] if token_id.startswith("pbt_") else token_id
        store, url = _open_store(store_url, demo)
        try:
            if not store.revoke_token(tid, SystemClock().now().timestamp()):
                raise InputError(f"token id {tid!r}: no such token in {url}")
        finally:
            store.close()
        if as_json:
            echo_json({"token_id": tid, "revoked": True})
        typer.echo(f"token {tid} revoked", err=True)

    @token.command("list")
    @friendly_errors
    def token_list(
        store_url: StoreOpt = None, demo: DemoOpt = False, as_json: JsonFlag = False
    ) -> None:
        """List tokens: id, name, role, node, created, expires, revoked (never secrets)."""
        from provisioner.api.render import iso
        from provisioner.clock import SystemClock

        store, _ = _open_store(store_url, demo)
        now = SystemClock().now().timestamp()
        try:
            rows = store.tokens()
        finally:
            store.close()
        cols = ["token_id", "name", "role", "node", "created", "expires", "revoked", "state"]
        listed = [
            dict(
                zip(
                    cols,
                    [
                        t.token_id,
                        t.name,
                        t.role,
                        t.node,
                        iso(t.created_ts),
                        iso(t.expires_ts),
                        iso(t.revoked_ts),
                        _token_state(t.revoked_ts, t.expires_ts, now),
                    ],
                    strict=True,
                )
            )
            for t in rows
        ]
        if as_json:
            echo_json(listed)
            return
        typer.echo("\t".join(cols))
        for row in listed:
            typer.echo("\t".join(row[c] or "-" for c in cols))

    app.add_typer(token, name="token")
