"""The composition root: the one place that reads settings and wires the store, the clock, the
Slurm and cloud adapters, the reconcile loop and the API.

Settings come from the environment (prefix `PROVISIONER_`, plus the standard `SLURM_CONF`,
`SLURMRESTD_SOCKET` and `AWS_ENDPOINT_URL`) and are read when `load_settings()` is called, never
at import time. Everything `build_controller` builds can be injected instead (the demo passes its
in-memory cluster and moto's endpoint; tests pass a ManualClock and fakes).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from provisioner import data_files
from provisioner.clock import Clock, SteadyClock
from provisioner.config.models import Policy
from provisioner.domain.errors import ProvisionerError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from provisioner.act.ports import CloudPorts, PoolSpec
    from provisioner.observe.slurm.observer import SlurmObserver
    from provisioner.plan.catalog import Catalog
    from provisioner.reconcile.leadership import Leadership
    from provisioner.reconcile.loop import ControllerLoop, Hook, LoopConfig, PassReport, Reconciler
    from provisioner.register.ports import JobControl, NodeControl, NodeLauncher
    from provisioner.register.power_queue import PowerRequestQueue
    from provisioner.store import Store

log = logging.getLogger("provisioner")

DEFAULT_POLICIES = data_files.policies_dir()


class Settings(BaseSettings):
    """Controller settings. Env: `PROVISIONER_<NAME>` (e.g. `PROVISIONER_STORE_URL`)."""

    model_config = SettingsConfigDict(
        env_prefix="PROVISIONER_", extra="ignore", populate_by_name=True
    )

    store_url: str = "sqlite:///provisioner.sqlite"
    # Where the API's heavy reads (the FOCUS export) read, in a process of their own: a
    # PostgreSQL replica, say. Default: the store itself (read-only sessions on PostgreSQL).
    read_store_url: str | None = None
    policies: Path = DEFAULT_POLICIES
    catalog: Path | None = None
    # Slurm: `cli` (squeue/sinfo/scontrol), `rest` (slurmrestd for reads with the CLI as
    # fallback, scontrol for changes), `none` (no scheduler: the loop still syncs clouds and
    # accounts)
    slurm_mode: Literal["cli", "rest", "none"] = "cli"
    # folder of the Slurm commands (first in PATH); default: PATH
    slurm_bin_dir: str | None = None
    slurm_conf: str | None = Field(
        default=None, validation_alias=AliasChoices("PROVISIONER_SLURM_CONF", "SLURM_CONF")
    )
    slurm_rest_socket: str | None = Field(
        default=None,
        validation_alias=AliasChoices("PROVISIONER_SLURM_REST_SOCKET", "SLURMRESTD_SOCKET"),
    )
    # slurmrestd over HTTP with a JWT (23.02+): URL, and the token from a file or an env var
    slurm_rest_url: str | None = Field(
        default=None, validation_alias=AliasChoices("PROVISIONER_SLURM_REST_URL", "SLURMRESTD_URL")
    )
    slurm_rest_token_file: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("PROVISIONER_SLURM_REST_TOKEN_FILE", "SLURMRESTD_TOKEN_FILE"),
    )
    slurm_rest_token_env: str = "SLURM_JWT"
    slurm_rest_user: str | None = Field(
        default=None,
        validation_alias=AliasChoices("PROVISIONER_SLURM_REST_USER", "SLURMRESTD_USER"),
    )
    slurm_timeout_s: float = Field(default=15.0, gt=0)
    # The Slurm hooks' handoff queue (provisioner slurm resume|suspend|resume-fail)
    state_dir: Path | None = None
    # `same-host-stand-in`: play each running instance's VM by starting its node's slurmd on
    # this host (the older Slurm tests and the chaos soak; burst VMs join as hosts of their
    # own in tests/hosts)
    launcher: Literal["none", "same-host-stand-in"] = "none"
    launcher_pid_dir: Path | None = None
    launcher_spool_dir: Path | None = None
    aws_endpoint_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("PROVISIONER_AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL"),
    )
    gce_endpoint: str | None = None
    # IAM Credentials, which doctor calls to read the munge key's secret as a pool's service
    # account (None: Google's own endpoint)
    gcp_iam_endpoint: str | None = None
    gcp_project: str = ""
    pool_driver: Literal["auto", "sdk", "pulumi"] = "auto"
    # munged's socket for decoding burst nodes' signed spot warnings: the one slurmctld uses
    # ("" = munge's default, /run/munge/munge.socket.2)
    munge_socket: str = ""
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=0, le=65535)
    metrics_public: bool = False
    tick_s: float = Field(default=15.0, gt=0)
    orphan_grace_s: float = Field(default=120.0, ge=0)
    sweep_max_disagreements: int = Field(default=5, ge=0)
    # Several controllers on one store (docs/ha.md): `auto` leads by lease on PostgreSQL and
    # runs alone on SQLite; `on` uses the lease on either; `off` never (one controller only).
    ha: Literal["auto", "on", "off"] = "auto"
    lease_ttl_s: float = Field(default=30.0, gt=0)
    # This process's name in the lease (default host:pid:random, unique per process)
    controller_id: str = ""


def heavy_read_url(settings: Settings) -> str | None:
    """Where export processes read: the replica, else the store, unless only this process can
    open it (in-memory SQLite), where the export stays in the API's thread (None)."""
    if settings.read_store_url:
        return settings.read_store_url
    from sqlalchemy.engine import make_url

    u = make_url(settings.store_url)
    if u.get_backend_name() == "sqlite" and u.database in (None, "", ":memory:"):
        return None
    return settings.store_url


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment now, with explicit overrides (CLI options) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


@dataclass
class SlurmParts:
    """The scheduler side of the loop; any part may be None (not wired)."""

    observer: SlurmObserver | None = None
    node_control: NodeControl | None = None
    job_control: JobControl | None = None
    launcher: NodeLauncher | None = None
    power_queue: PowerRequestQueue | None = None


def build_slurm(settings: Settings, clock: Clock, policy: Policy) -> SlurmParts:
    if settings.slurm_mode == "none":
        return SlurmParts()
    from provisioner.command_runner import SubprocessRunner
    from provisioner.domain.errors import SnapshotError
    from provisioner.observe.slurm.observer import (
        CliSlurmObserver,
        FallbackSlurmObserver,
        RestSlurmObserver,
        RestToken,
    )
    from provisioner.observe.slurm.parse import DEFAULT_CLOUD_PARTITIONS
    from provisioner.register.job_control import ScontrolJobControl
    from provisioner.register.slurm_control import SlurmControl

    runner = SubprocessRunner(slurm_conf=settings.slurm_conf, bin_dir=settings.slurm_bin_dir)
    cloud_parts = set(DEFAULT_CLOUD_PARTITIONS) | {p.partition for p in policy.pools}
    cli = CliSlurmObserver(
        runner,
        clock,
        timeout_s=settings.slurm_timeout_s,
        cloud_partitions=cloud_parts,
        ping_timeout_s=min(3.0, settings.slurm_timeout_s),
    )
    try:  # the release, checked when the controller starts (unsupported: refuse to start)
        cli.start()
    except SnapshotError as exc:  # Slurm not reachable yet: the first pass detects it
        log.warning("slurm: release not detected at start: %s", exc)
    observer: SlurmObserver = cli
    if settings.slurm_mode == "rest":
        if not settings.slurm_rest_socket and not settings.slurm_rest_url:
            raise ProvisionerError(
                "slurm_mode=rest needs PROVISIONER_SLURM_REST_URL or PROVISIONER_SLURM_REST_SOCKET"
            )
        token = None
        if settings.slurm_rest_url:
            token = RestToken(
                file=settings.slurm_rest_token_file,
                env=None if settings.slurm_rest_token_file else settings.slurm_rest_token_env,
                user=settings.slurm_rest_user,
            )
        rest = RestSlurmObserver(
            None if settings.slurm_rest_url else settings.slurm_rest_socket,
            clock,
            base_url=settings.slurm_rest_url,
            token=token,
            api_version=cli.version.data_parser if cli.version else None,
            timeout_s=settings.slurm_timeout_s,
            cloud_partitions=cloud_parts,
        )
        observer = FallbackSlurmObserver(rest, cli)
    parts = SlurmParts(
        observer=observer,
        node_control=SlurmControl(runner, timeout_s=settings.slurm_timeout_s),
        job_control=ScontrolJobControl(runner, timeout_s=settings.slurm_timeout_s),
    )
    if settings.state_dir is not None:
        from provisioner.register.power_queue import SqlitePowerRequestQueue

        parts.power_queue = SqlitePowerRequestQueue(settings.state_dir)
    if settings.launcher == "same-host-stand-in":
        from provisioner.register.same_host_stand_in import SameHostSlurmdStandIn

        if not settings.slurm_conf:
            raise ProvisionerError("launcher=same-host-stand-in needs SLURM_CONF")
        conf = Path(settings.slurm_conf)
        pid_dir = settings.launcher_pid_dir or conf.parent.parent / "run"
        spool = settings.launcher_spool_dir or conf.parent.parent / "state"
        bin_dir = Path(settings.slurm_bin_dir or "/usr/sbin")
        parts.launcher = SameHostSlurmdStandIn(
            conf, pid_dir, spool_dir=spool, slurmd=str(bin_dir / "slurmd")
        )
    return parts


def build_clouds(
    settings: Settings, policy: Policy, *, aws_session: Any = None, gcp_credentials: Any = None
) -> dict[str, CloudPorts]:
    """Cloud ports for the clouds the policy's pools use (SDKs imported only if needed)."""
    from provisioner.act.drivers import SdkPoolDriver, select_pool_driver
    from provisioner.act.field_preflight import FieldPreflight
    from provisioner.act.ports import CloudCapacity, CloudPorts, ConsoleReader, PoolDriver

    used = {p.cloud for p in policy.pools}
    sdk: dict[str, PoolDriver] = {}
    caps: dict[str, CloudCapacity] = {}
    fields: dict[str, FieldPreflight] = {}
    if "aws" in used:
        from provisioner.act.aws import AwsCapacity, AwsClients, AwsPoolDriver
        from provisioner.act.field_aws import AwsFieldPreflight

        clients = AwsClients(settings.aws_endpoint_url, session=aws_session)
        regions = sorted({r for p in policy.pools if p.cloud == "aws" for r in p.regions})
        sdk["aws"] = AwsPoolDriver(clients)
        caps["aws"] = AwsCapacity(regions, clients)
        fields["aws"] = AwsFieldPreflight(clients)
    if "gcp" in used:
        project = settings.gcp_project or policy.node.gcp_project
        if project:
            from provisioner.act.field_gcp import GcpFieldPreflight
            from provisioner.act.gcp import GcpCapacity, GcpClients, GcpPoolDriver

            gclients = GcpClients(project, settings.gce_endpoint, credentials=gcp_credentials)
            sdk["gcp"] = GcpPoolDriver(gclients)
            caps["gcp"] = GcpCapacity(gclients)
            fields["gcp"] = GcpFieldPreflight(gclients, iam_endpoint=settings.gcp_iam_endpoint)
        else:
            log.warning("pools use gcp but no project is set (PROVISIONER_GCP_PROJECT)")
    if not caps:
        return {}

    def make_pulumi() -> PoolDriver:
        from provisioner.act.pulumi_driver import (
            AutomationStacks,
            PulumiPoolDriver,
            load_pool_program,
        )

        return PulumiPoolDriver(AutomationStacks(), load_pool_program())

    if settings.pool_driver == "sdk":
        driver: PoolDriver = SdkPoolDriver(sdk)
    elif settings.pool_driver == "pulumi":
        driver = make_pulumi()
    else:
        kind, driver = select_pool_driver(sdk=lambda: SdkPoolDriver(sdk), pulumi=make_pulumi)
        log.info("pool driver: %s", kind)
    # a VM's console says why it did not join only where VMs boot and join as hosts of their
    # own: not in the demo (no Slurm) nor under the same-host stand-in
    own_vms = (
        settings.slurm_mode != "none"
        and settings.launcher == "none"
        and policy.node.node_address == "instance"
    )
    return {
        cloud: CloudPorts(
            driver=driver,
            capacity=cap,
            field=fields.get(cloud),
            console=cap if isinstance(cap, ConsoleReader) and own_vms else None,
        )
        for cloud, cap in caps.items()
    }


def user_data_for(policy: Policy) -> Callable[[PoolSpec], str] | None:
    """The node bootstrap (cloud-init) from infra/bootstrap, when the template is at hand."""
    from provisioner.act.userdata import bootstrap_from, default_template_path, render_user_data

    if not default_template_path().exists():
        log.warning("no node bootstrap template at %s", default_template_path())
        return None
    boot = bootstrap_from(policy.node)
    # Rendered without the decision id: the node shape (and so the launch template version)
    # then stays the same across scale-ups; the instance's tags carry the decision.
    return lambda spec: render_user_data(replace(spec, decision_id=""), boot)


@dataclass
class Controller:
    settings: Settings
    policy: Policy
    clock: Clock
    store: Store
    reconciler: Reconciler
    loop: ControllerLoop
    extra_status: dict[str, Any] = field(default_factory=dict)
    _app: FastAPI | None = None

    @property
    def app(self) -> FastAPI:
        if self._app is None:
            from provisioner.account.focus import FocusOptions
            from provisioner.api.app import ApiDeps, create_app
            from provisioner.api.heavy_reads import HeavyReads
            from provisioner.observe.munge_credentials import MungeDecoder
            from provisioner.store.read_only import open_read_only

            rec = self.reconciler

            lead = self.loop.leadership

            def status() -> Mapping[str, Any]:
                extra = {"leadership": lead.view().as_dict()} if lead is not None else {}
                return {**rec.status(), **extra, **self.extra_status}

            self._app = create_app(
                ApiDeps(
                    store=self.store,
                    clock=self.clock,
                    planner=rec.dry_run,
                    snapshot=lambda: rec.last_snapshot,
                    status_extra=status,
                    focus=FocusOptions(controller=self.policy.controller),
                    metrics_public=self.settings.metrics_public,
                    policy=self.policy,
                    spot_inbox=rec.deps.spot_inbox,
                    munge=MungeDecoder(self.settings.munge_socket),
                    heavy_reads=HeavyReads(
                        read_url=heavy_read_url(self.settings), open_store=open_read_only
                    ),
                )
            )
        return self._app


def build_controller(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    policy: Policy | None = None,
    catalog: Catalog | None = None,
    slurm: SlurmParts | None = None,
    clouds: Mapping[str, CloudPorts] | None = None,
    hook: Hook | None = None,
    config: LoopConfig | None = None,
    on_pass: Callable[[PassReport], None] | None = None,
    before_pass: Callable[[], None] | None = None,
) -> Controller:
    from provisioner.act.specs import NodeImages
    from provisioner.config import load_policy
    from provisioner.plan.catalog import load_catalog
    from provisioner.reconcile.loop import ControllerLoop, LoopConfig, Reconciler, ReconcilerDeps
    from provisioner.store import Store

    settings = settings or load_settings()
    policy = policy or load_policy(settings.policies)
    catalog = catalog or load_catalog(settings.catalog)
    store = store or Store(settings.store_url)
    policy = with_controller_identity(policy, store)
    clock = clock or SteadyClock()
    if isinstance(clock, SteadyClock) and not clock.resumed:
        # The controller's own clock: monotonic, carried on from this boot's last mark.
        clock.resume(store.clock_mark(clock.boot_id), store.latest_clock_ts())
    slurm = slurm if slurm is not None else build_slurm(settings, clock, policy)
    clouds = clouds if clouds is not None else build_clouds(settings, policy)
    config = config or LoopConfig(
        orphan_grace_s=max(settings.orphan_grace_s, 2 * settings.tick_s),
        sweep_max_disagreements=settings.sweep_max_disagreements,
    )
    reconciler = Reconciler(
        ReconcilerDeps(
            store=store,
            clock=clock,
            policy=policy,
            catalog=catalog,
            observer=slurm.observer,
            node_control=slurm.node_control,
            job_control=slurm.job_control,
            clouds=dict(clouds),
            images=NodeImages(dict(policy.node.images)),
            user_data=user_data_for(policy),
            gcp_project=settings.gcp_project or policy.node.gcp_project,
            launcher=slurm.launcher,
            power_queue=slurm.power_queue,
            hook=hook,
            config=config,
        )
    )
    loop = ControllerLoop(
        reconciler,
        settings.tick_s,
        on_pass=on_pass,
        before_pass=before_pass,
        leadership=leadership_for(settings, store, policy.controller),
    )
    reconciler.deps.spot_inbox.on_post(loop.wake)
    return Controller(settings, policy, clock, store, reconciler, loop)


# The controller tag every installation used before identities were kept in the store.
LEGACY_CONTROLLER = "burst-ctl"


def with_controller_identity(policy: Policy, store: Store) -> Policy:
    """The policy with this installation's controller identity, which every cloud resource it
    makes is tagged with and which decides what it owns. A policy that names its controller
    keeps that name. Otherwise the identity kept in the store is used (so an HA pair shares
    it), claimed on the first start: `burst-ctl` for a store that already holds scale-ups or
    instances (an installation from before identities were kept: its running VMs carry that
    tag and stay its own), else `burst-` and 8 random hex digits, unique to this
    installation (a second installation in the same account owns none of the first's)."""
    import secrets

    from provisioner.domain.intents import IntentKind

    if "controller" in policy.model_fields_set:
        return policy
    older = store.first_intent_ts(IntentKind.SCALE_UP) is not None or bool(
        store.instances(live_only=True)
    )
    proposed = LEGACY_CONTROLLER if older else f"burst-{secrets.token_hex(4)}"
    return policy.model_copy(update={"controller": store.claim_controller_id(proposed)})


def leadership_for(settings: Settings, store: Store, name: str) -> Leadership | None:
    """The lease this controller leads by, when several controllers may share the store."""
    from provisioner.reconcile.leadership import Leadership

    on = settings.ha == "on" or (settings.ha == "auto" and store.dialect == "postgresql")
    if not on:
        return None
    holder = settings.controller_id or None
    return Leadership(store, name, ttl_s=settings.lease_ttl_s, holder=holder)


class ApiServer:
    """uvicorn in a thread of this process, bound to the configured host (127.0.0.1 default)."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        import uvicorn

        self.host = host
        self._server = uvicorn.Server(
            uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(target=self._server.run, name="api", daemon=True)

    def start(self, timeout_s: float = 15.0) -> int:
        """Start serving; returns the bound port. Raises ProvisionerError when it cannot."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:  # a real server must start: poll with a deadline
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ProvisionerError(f"the API could not listen on {self.host} (port in use?)")
            time.sleep(0.02)
        sock = self._server.servers[0].sockets[0]
        return int(sock.getsockname()[1])

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def serve(
    controller: Controller,
    *,
    on_started: Callable[[str], None] | None = None,
    duration_s: float | None = None,
    max_passes: int | None = None,
) -> int:
    """Run the loop in this thread and the API beside it until SIGTERM/SIGINT, `duration_s` or
    `max_passes`. A stop lets the current pass finish. Returns the number of passes."""
    s = controller.settings
    api = ApiServer(controller.app, s.api_host, s.api_port)
    port = api.start()
    url = f"http://{s.api_host}:{port}"
    controller.extra_status["api_url"] = url
    loop = controller.loop
    previous: dict[signal.Signals, Any] = {}

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: finishing the current pass, then stopping", signum)
        loop.request_stop()

    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, stop)
    timer = threading.Timer(duration_s, loop.request_stop) if duration_s else None
    try:
        if on_started is not None:
            on_started(url)
        if timer is not None:
            timer.daemon = True
            timer.start()
        return loop.run(max_passes)
    finally:
        if timer is not None:
            timer.cancel()
        api.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
