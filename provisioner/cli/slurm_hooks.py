"""`provisioner slurm resume|suspend|resume-fail HOSTLIST`: Slurm's power-saving hooks.

Set as ResumeProgram / SuspendProgram / ResumeFailProgram (through a wrapper script, since Slurm
passes only the hostlist): each call records one request per node in the durable handoff queue
under the state dir and returns at once; the controller acts on it on its next pass. Calling
twice is harmless. Works with no PATH and with signals blocked (it only writes one SQLite file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from provisioner.cli.common import friendly_errors

DEFAULT_STATE_DIR = Path("/var/lib/gpu-burst-provisioner")

StateDirOpt = Annotated[
    Path,
    typer.Option(
        "--state-dir",
        envvar="PROVISIONER_STATE_DIR",
        help="Directory of the controller's handoff queue.",
    ),
]
HostlistArg = Annotated[str, typer.Argument(help="Slurm hostlist, e.g. cloud-aws-[1-3,5].")]


def _handoff(action: str, hostlist: str, state_dir: Path) -> None:
    from provisioner.clock import SystemClock
    from provisioner.domain.errors import InputError
    from provisioner.domain.hostlist import HostlistError, expand_hostlist
    from provisioner.register.power_queue import PowerAction, SqlitePowerRequestQueue

    try:
        nodes = expand_hostlist(hostlist)
    except HostlistError as exc:
        raise InputError(f"hostlist: {exc}") from None
    if not nodes:
        raise InputError(f"hostlist {hostlist!r} names no node")
    queue = SqlitePowerRequestQueue(state_dir)
    now = SystemClock().now().timestamp()
    new = queue.submit(PowerAction(action), nodes, now, hostlist=hostlist)
    typer.echo(f"{action} {hostlist}: {len(nodes)} node(s), {new} new request(s) in {queue.path}")


def register(app: typer.Typer) -> None:
    slurm = typer.Typer(
        name="slurm",
        help="Slurm power-saving hooks (Slurm-driven mode).",
        no_args_is_help=True,
    )

    @slurm.command()
    @friendly_errors
    def resume(hostlist: HostlistArg, state_dir: StateDirOpt = DEFAULT_STATE_DIR) -> None:
        """ResumeProgram: Slurm wants these burst nodes up."""
        _handoff("resume", hostlist, state_dir)

    @slurm.command()
    @friendly_errors
    def suspend(hostlist: HostlistArg, state_dir: StateDirOpt = DEFAULT_STATE_DIR) -> None:
        """SuspendProgram: Slurm powered these idle or drained burst nodes down."""
        _handoff("suspend", hostlist, state_dir)

    @slurm.command("resume-fail")
    @friendly_errors
    def resume_fail(hostlist: HostlistArg, state_dir: StateDirOpt = DEFAULT_STATE_DIR) -> None:
        """ResumeFailProgram: these nodes did not register within ResumeTimeout."""
        _handoff("resume-fail", hostlist, state_dir)

    @slurm.command()
    @friendly_errors
    def requests(state_dir: StateDirOpt = DEFAULT_STATE_DIR) -> None:
        """List the power requests not yet handled by the controller."""
        from provisioner.register.power_queue import SqlitePowerRequestQueue

        for r in SqlitePowerRequestQueue(state_dir).pending():
            typer.echo(f"{r.request_id}\t{r.action}\t{r.node}\t{r.requested_ts:.0f}")

    app.add_typer(slurm, name="slurm")
