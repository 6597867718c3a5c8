"""What every step of a reconcile pass shares: the injected dependencies (`ReconcilerDeps`), the
loop's settings (`LoopConfig`), the pass report, the crash points `hook(step)` marks, and
`PassContext`, the lookups over the policy, the catalog and the store the steps have in common.

`PassContext` copies the policy, catalog, store and settings once (as the reconciler does); the
rest of the deps (clock, observer, clouds, Slurm ports, hook) are read from `deps` at each use.
The cloud actuator and the Slurm registrar do not see it: the reconciler hands them their ports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from provisioner.act.clock_probe import SkewProbe, watch_clouds
from provisioner.act.pool_specs import OfferSpecs
from provisioner.act.ports import CloudPorts, PoolSpec
from provisioner.act.scale_up import STEP_SCALE_UP_AFTER_CLOUD, STEP_SCALE_UP_AFTER_INTENT
from provisioner.act.specs import NodeImages, UserDataFn
from provisioner.act.terminate import STEP_TERMINATE_AFTER_CLOUD, STEP_TERMINATE_AFTER_INTENT
from provisioner.clock import Clock
from provisioner.config.models import Policy, PoolPolicy
from provisioner.domain.cloud_clock import SkewTracker
from provisioner.domain.offers import Offer, OfferKey
from provisioner.domain.records import StoredInstance
from provisioner.observe.slurm.observer import SlurmObserver
from provisioner.observe.spot_inbox import SpotInbox
from provisioner.plan.catalog import Catalog
from provisioner.ports.store import ControllerStore
from provisioner.register.ports import JobControl, NodeControl, NodeLauncher
from provisioner.register.power_queue import PowerRequestQueue
from provisioner.register.registrar import STEP_DRAIN_AFTER_SLURM

# Where a crash matters; `hook(step)` is called at each (tests raise or SIGKILL there). The
# steps name their own; the one between a scale-up and its jobs' move is the coordinator's.
STEP_SCALE_UP_BEFORE_REGISTER = "scale_up.before_register"
STEPS = (
    STEP_SCALE_UP_AFTER_INTENT,
    STEP_SCALE_UP_AFTER_CLOUD,
    STEP_SCALE_UP_BEFORE_REGISTER,
    STEP_DRAIN_AFTER_SLURM,
    STEP_TERMINATE_AFTER_INTENT,
    STEP_TERMINATE_AFTER_CLOUD,
)
__all__ = [
    "STEPS",
    "STEP_DRAIN_AFTER_SLURM",
    "STEP_SCALE_UP_AFTER_CLOUD",
    "STEP_SCALE_UP_AFTER_INTENT",
    "STEP_SCALE_UP_BEFORE_REGISTER",
    "STEP_TERMINATE_AFTER_CLOUD",
    "STEP_TERMINATE_AFTER_INTENT",
    "Hook",
    "LoopConfig",
    "PassContext",
    "PassReport",
    "ReconcilerDeps",
]

Hook = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class LoopConfig:
    orphan_grace_s: float = 120.0  # must exceed one tick
    retry_terminate_s: float = 120.0
    unbound_timeout_s: float = 600.0  # an instance Slurm asked no node for is let go
    # The sweep's safety valve: more store/cloud disagreements than this in one pass (a store
    # restored from an old copy, a wrong store URL) and it terminates nothing until approved.
    sweep_max_disagreements: int = 5
    telemetry_max_age_s: float = 300.0
    settle_s: float = 0.0  # accountant: bill live instances up to now - settle_s
    intent_window_s: float = 3600.0  # scale-up intents read back for adoption
    placeholder_s: float = 600.0  # launched-but-not-yet-listed capacity counts this long
    terminal_window_s: float = 86_400.0  # closed records kept in view for the sweep


@dataclass
class ReconcilerDeps:
    store: ControllerStore
    clock: Clock
    policy: Policy
    catalog: Catalog
    observer: SlurmObserver | None = None
    node_control: NodeControl | None = None
    job_control: JobControl | None = None
    clouds: Mapping[str, CloudPorts] = field(default_factory=dict)
    images: NodeImages = field(default_factory=NodeImages)
    user_data: UserDataFn | None = None
    gcp_project: str = ""
    launcher: NodeLauncher | None = None
    power_queue: PowerRequestQueue | None = None
    hook: Hook | None = None
    config: LoopConfig = field(default_factory=LoopConfig)
    # the clouds' measured skew, fed by the adapters' answers (a fresh one unless shared)
    skews: SkewTracker = field(default_factory=SkewTracker)
    # burst nodes' spot warnings, posted by the API (a fresh, empty one unless shared)
    spot_inbox: SpotInbox = field(default_factory=SpotInbox)


@dataclass
class PassReport:
    now_ts: float
    stale: bool = False
    decisions: int = 0
    decisions_recorded: int = 0
    scale_ups: int = 0
    nodes_requested: int = 0
    nodes_placed: int = 0
    adopted: int = 0
    drained: int = 0
    terminated: int = 0
    jobs_moved: int = 0
    ledger_rows: int = 0
    ledger_usd: Decimal = Decimal(0)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a cloud stamp far off (clamped)
    seconds: float = 0.0
    sweep_held: str = ""  # the orphan sweep's safety valve holds, and why


class PassContext:
    """The deps plus the lookups several steps need: the clock, the crash hook, pools, offers,
    pool specs and the instance records in view.

    `now()` is the lifecycle's clock: the injected clock, held at the latest stamp any
    controller wrote to the store (`hold_at_least`) and at its own last answer, so a clock
    stepped back (NTP, another controller's host) never dates a step before the one it
    follows. The clouds' adapters report their answers to `probes` (the skew)."""

    def __init__(self, deps: ReconcilerDeps) -> None:
        self.deps = deps
        self.store = deps.store
        self.policy = deps.policy
        self.catalog = deps.catalog
        self.config = deps.config
        self.controller = deps.policy.controller
        self.specs = OfferSpecs(
            deps.policy,
            deps.catalog,
            images=deps.images,
            user_data=deps.user_data,
            project=deps.gcp_project,
        )
        self._floor = 0.0
        self.skews = deps.skews
        self.probes: dict[str, SkewProbe] = watch_clouds(deps.clouds, deps.skews, self.clock_now)

    def clock_now(self) -> float:
        """The injected clock as it reads now (a cloud call's send and receive times)."""
        return self.deps.clock.now().timestamp()

    def now(self) -> float:
        self._floor = max(self._floor, self.clock_now())
        return self._floor

    def hold_at_least(self, ts: float) -> None:
        self._floor = max(self._floor, ts)

    def hook(self, step: str) -> None:
        if self.deps.hook is not None:
            self.deps.hook(step)

    def records(self, now: float) -> list[StoredInstance]:
        keep = now - self.config.terminal_window_s
        return [
            si
            for si in self.store.instances()
            if not si.instance.state.terminal or (si.ended_ts or now) >= keep
        ]

    def pool(self, name: str) -> PoolPolicy | None:
        return self.specs.pool(name)

    @property
    def offers_by_type(self) -> dict[tuple[str, str, str], Offer]:
        """(cloud, region, instance type) -> the catalog's offer."""
        return self.specs.offers_by_type

    def offer(self, key: OfferKey) -> Offer | None:
        return self.specs.offer(key)

    def images_for(self, pool: PoolPolicy) -> NodeImages:
        return self.specs.images_for(pool)

    def spec(self, pool: PoolPolicy, key: OfferKey, decision: str) -> PoolSpec | None:
        return self.specs.spec(pool, key, decision)
