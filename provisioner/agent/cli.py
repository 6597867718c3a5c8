"""`provisioner agent`: the GPU node agent.

Exit codes: 0 done, 2 bad option, 3 NVML unusable here (no binding, no driver, no GPU),
1 anything unexpected. Never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from provisioner.agent.nvml_api import Nvml
from provisioner.clock import Clock
from provisioner.domain.errors import InvalidArgument

if TYPE_CHECKING:
    from provisioner.agent.sampler import NvmlSampler

EXIT_BAD_INPUT = 2
EXIT_NVML_UNAVAILABLE = 3

log = logging.getLogger("provisioner.agent")


@dataclass
class AgentDeps:
    """What the command wires; tests replace any of it (composition root for the agent)."""

    nvml_factory: Callable[[], Nvml] | None = None
    clock: Clock | None = None
    job_resolver: Callable[[int], str | None] | None = None
    hostname: Callable[[], str] = socket.gethostname
    wait: Callable[[float], bool] | None = None  # None: a real wait, ended by SIGTERM/SIGINT
    http_transport: object | None = None  # an httpx.BaseTransport for tests
    push_sleep: Callable[[float], None] | None = None


def parse_listen(value: str) -> tuple[str, int] | None:
    """'HOST:PORT', '[V6]:PORT' or 'off'. Raises ValueError with a readable reason."""
    if value.strip().lower() in ("off", "none", ""):
        return None
    host, sep, port_s = value.rpartition(":")
    if not sep or not port_s.isdigit():
        raise InvalidArgument(f"--listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:9400")
    port = int(port_s)
    if not 0 <= port <= 65535:
        raise InvalidArgument(f"--listen {value!r}: port out of range")
    host = host.strip("[]") or "127.0.0.1"
    return host, port


def _fail(message: str, code: int) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


def register(app: typer.Typer, deps: AgentDeps | None = None) -> None:
    d = deps or AgentDeps()

    @app.command("agent")
    def agent(
        once: Annotated[
            bool, typer.Option("--once", help="Print one sample as Prometheus text and exit.")
        ] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="With --once: print the push payload as JSON.")
        ] = False,
        listen: Annotated[
            str, typer.Option(help="Serve /metrics on HOST:PORT ('off' to disable).")
        ] = "127.0.0.1:9400",
        interval: Annotated[float, typer.Option(help="Seconds between samples.")] = 15.0,
        controller: Annotated[
            str | None,
            typer.Option(
                help="Controller base URL: POST URL/v1/telemetry, bearer token from "
                "$PROVISIONER_AGENT_TOKEN."
            ),
        ] = None,
        node: Annotated[
            str | None, typer.Option(help="Slurm node name (default: short hostname).")
        ] = None,
        count: Annotated[
            int, typer.Option(help="Stop after this many samples (0: run until SIGTERM).")
        ] = 0,
        slurm_jobs: Annotated[
            bool,
            typer.Option(help="Map GPU processes to Slurm jobs through /proc."),
        ] = True,
    ) -> None:
        """Sample every GPU through NVML: DCGM-compatible /metrics, pushes to the controller."""
        try:
            _agent(
                d, once or as_json, as_json, listen, interval, controller, node, count, slurm_jobs
            )
        except typer.Exit:
            raise
        except Exception as exc:  # pragma: no cover - last resort: a line, not a traceback
            raise _fail(f"agent failed: {type(exc).__name__}: {exc}", 1) from None


def _agent(
    d: AgentDeps,
    once: bool,
    as_json: bool,
    listen: str,
    interval: float,
    controller: str | None,
    node: str | None,
    count: int,
    slurm_jobs: bool,
) -> None:
    from provisioner.agent.sampler import NvmlSampler, NvmlUnavailable, ProcJobResolver
    from provisioner.clock import SystemClock

    if interval <= 0:
        raise _fail("--interval must be > 0 seconds", EXIT_BAD_INPUT)
    if count < 0:
        raise _fail("--count must be >= 0", EXIT_BAD_INPUT)
    try:
        address = parse_listen(listen)
    except ValueError as exc:
        raise _fail(str(exc), EXIT_BAD_INPUT) from None
    if controller is not None and not controller.startswith(("http://", "https://")):
        raise _fail(f"--controller {controller!r}: expected an http(s):// URL", EXIT_BAD_INPUT)

    hostname = d.hostname()
    node_name = node or hostname.split(".", 1)[0]
    clock = d.clock or SystemClock()
    nvml = d.nvml_factory() if d.nvml_factory is not None else _nvml_backend(hostname)
    resolver = d.job_resolver if d.job_resolver is not None else ProcJobResolver()
    sampler = NvmlSampler(
        nvml,
        clock,
        node=node_name,
        hostname=hostname,
        job_resolver=resolver if slurm_jobs else None,
        watch_xid=not once,
    )
    try:
        sampler.open()
    except NvmlUnavailable as exc:
        raise _fail(str(exc), EXIT_NVML_UNAVAILABLE) from None

    try:
        if once:
            _once(sampler, as_json)
        else:
            _serve(d, sampler, clock, address, interval, controller, count)
    except NvmlUnavailable as exc:
        raise _fail(str(exc), EXIT_NVML_UNAVAILABLE) from None
    finally:
        sampler.close()


# A host with no GPU (a demo, a test host standing in for a burst VM) may ask for idle fake
# GPUs instead of NVML: the agent then reports N A100s at 0 % through the same sampler.
FAKE_GPUS_ENV = "PROVISIONER_AGENT_FAKE_GPUS"


def _nvml_backend(hostname: str) -> Nvml:
    from provisioner.agent.nvml_api import PynvmlBackend

    raw = os.environ.get(FAKE_GPUS_ENV, "").strip()
    if not raw:
        return PynvmlBackend()
    if not raw.isdigit() or not 1 <= int(raw) <= 64:
        raise _fail(f"{FAKE_GPUS_ENV}={raw!r}: expected a GPU count from 1 to 64", EXIT_BAD_INPUT)
    from provisioner.agent.nvml_fake import FakeGpu, FakeNvml

    log.warning("%s=%s: reporting fake idle GPUs, not NVML", FAKE_GPUS_ENV, raw)
    return FakeNvml(
        [
            FakeGpu(
                uuid=f"GPU-fake-{hostname}-{i}",
                minor_number=i,
                pci_bus_id=f"00000000:{7 + i:02X}:00.0",
            )
            for i in range(int(raw))
        ]
    )


def _once(sampler: NvmlSampler, as_json: bool) -> None:
    from provisioner.agent.metrics import render_metrics

    telemetry = sampler.sample()
    if as_json:
        typer.echo(telemetry.model_dump_json(indent=2))
    else:
        typer.echo(render_metrics(telemetry), nl=False)


def _serve(
    d: AgentDeps,
    sampler: NvmlSampler,
    clock: Clock,
    address: tuple[str, int] | None,
    interval: float,
    controller: str | None,
    count: int,
) -> None:
    import httpx

    from provisioner.agent.daemon import (
        TOKEN_ENV,
        MetricsCache,
        MetricsServer,
        TelemetryPusher,
        run_agent,
    )

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    cache = MetricsCache()
    server: MetricsServer | None = None
    if address is not None:
        try:
            server = MetricsServer(cache, *address)
        except OSError as exc:
            raise _fail(
                f"cannot listen on {address[0]}:{address[1]}: {exc.strerror or exc}",
                EXIT_BAD_INPUT,
            ) from None
        server.start()

    pusher: TelemetryPusher | None = None
    if controller:
        token = os.environ.get(TOKEN_ENV) or None
        client = None
        if d.http_transport is not None:
            assert isinstance(d.http_transport, httpx.BaseTransport)
            client = httpx.Client(transport=d.http_transport, timeout=5.0)
        pusher = TelemetryPusher(controller, token, client=client, sleep=d.push_sleep)
        if token is None:
            log.warning("%s is not set: pushing telemetry without a bearer token", TOKEN_ENV)

    wait = d.wait
    if wait is None:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not the main thread
                signal.signal(sig, lambda *_: stop.set())
        wait = stop.wait

    where = f"http://{server.address[0]}:{server.address[1]}/metrics" if server else "nowhere"
    log.info(
        "agent %s: serving %s, pushing to %s every %gs",
        sampler.node,
        where,
        controller or "no controller",
        interval,
    )
    try:
        run_agent(
            sampler,
            clock,
            interval_s=interval,
            cache=cache,
            wait=wait,
            pusher=pusher,
            max_samples=count,
        )
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.stop()
        if pusher is not None:
            pusher.close()


def main() -> None:  # pragma: no cover - `python -m provisioner.agent.cli`
    """The agent alone, without the rest of the CLI: `python -m provisioner.agent.cli`."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(app)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
