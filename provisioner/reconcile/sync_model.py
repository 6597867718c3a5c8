"""The values passive sync trades in: what it reads (`SyncInput`), the steps it plans (`Adopt`,
`Bind`, `Move`, `Kill`, `NodeFix`) and the plan they make (`SyncPlan`). Kept apart from the rules
so the rules' modules can share them without importing one another."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from provisioner.act.ports import OwnedInstance
from provisioner.config.models import Interruptions
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.nodes import NodeState
from provisioner.domain.offers import Offer
from provisioner.domain.records import Intent, StoredInstance
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.domain.spot_warnings import SpotWarning

S = InstanceState
JOINED = frozenset(
    {NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED, NodeState.DRAINING, NodeState.DRAINED}
)
POWERED_OFF = frozenset({NodeState.POWERING_DOWN, NodeState.POWERED_DOWN})
# Nodes already on their way out of service: not drained again.
OUT_OF_SERVICE = POWERED_OFF | {NodeState.DRAINING, NodeState.DRAINED, NodeState.DOWN}
TERMINABLE = frozenset({S.REQUESTED, S.ALLOCATED, S.JOINING, S.READY, S.DRAINING})


@dataclass(frozen=True, slots=True)
class Adopt:
    """Store `instance`, launched by the scale-up of intent `token`."""

    token: str
    instance: CloudInstance


@dataclass(frozen=True, slots=True)
class Bind:
    instance_id: str
    node: str


@dataclass(frozen=True, slots=True)
class NameNode:
    """Name an instance's node on the instance (the tag or attribute its join program waits
    for): the instance is bound to `node`, listed, and not yet named so."""

    instance: OwnedInstance
    node: str
    # the NodeAddr Slurm gets first (node_address=instance): the instance's private address,
    # so the VM that learns the name is the one slurmctld talks to; "" sets none
    address: str = ""


@dataclass(frozen=True, slots=True)
class Move:
    instance_id: str
    to: InstanceState
    reason: str
    cloud_ts: float | None = None  # the cloud's stamp for the step, translated and clamped


@dataclass(frozen=True, slots=True)
class Kill:
    """Terminate `owned` in its cloud. `fail_node`: mark that Slurm node failed first (its jobs
    requeue). `transition`: move the record to terminating (False for a record already closed,
    or an orphan without one). `join_timeout`: the reason is a join failure."""

    instance_id: str
    owned: OwnedInstance
    reason: str
    fail_node: str = ""
    transition: bool = True
    join_failure: bool = False
    spot_warning: bool = False  # the cloud warned it takes the instance away


@dataclass(frozen=True, slots=True)
class AddressMismatch:
    """A bound node whose NodeAddr in Slurm is not its instance's private address: some other
    machine answers as that node (any VM holding the munge key can start `slurmd -N <node>`),
    or someone moved it. The node is drained and an alert recorded."""

    instance_id: str
    node: str
    expected: str  # the instance's private address, from the cloud
    found: str  # Slurm's NodeAddr


@dataclass(frozen=True, slots=True)
class NodeFix:
    node: str
    action: str  # "resume" (back to service) | "fail" (drain, requeue, down) | "drain"
    reason: str


@dataclass(frozen=True, slots=True)
class SignalJobs:
    """A spot warning that ends the instance: drain its node and send its running jobs
    `signal` (none when ""), so they can checkpoint before Slurm requeues them."""

    instance_id: str
    node: str
    signal: str
    reason: str


@dataclass(frozen=True, slots=True)
class SyncPlan:
    adopt: tuple[Adopt, ...] = ()
    bind: tuple[Bind, ...] = ()
    names: tuple[NameNode, ...] = ()
    moves: tuple[Move, ...] = ()
    kills: tuple[Kill, ...] = ()
    nodes: tuple[NodeFix, ...] = ()
    mismatches: tuple[AddressMismatch, ...] = ()
    orphans: tuple[CloudInstance, ...] = ()  # records to create, rebuilt from cloud tags
    sweep_hold: str = ""  # the safety valve holds the sweep, and why
    warnings: tuple[str, ...] = ()  # cloud stamps far outside what the controller saw
    signals: tuple[SignalJobs, ...] = ()
    # the earliest time a step planned for later is due (a requeue after a spot warning's
    # checkpoint time): the loop runs a pass then, not only at its next tick
    wake_at: float | None = None

    @property
    def empty(self) -> bool:
        return not (
            self.adopt
            or self.bind
            or self.names
            or self.moves
            or self.kills
            or self.nodes
            or self.mismatches
            or self.orphans
            or self.signals
        )


@dataclass(frozen=True, slots=True)
class SyncInput:
    now_ts: float
    controller: str
    records: Sequence[StoredInstance]
    owned: Sequence[OwnedInstance]
    listing_complete: bool
    snapshot: ClusterSnapshot
    intents: Sequence[Intent] = ()
    grace_s: float = 120.0
    join_timeout_s: float = 600.0
    retry_terminate_s: float = 120.0
    unbound_timeout_s: float = 600.0
    timeouts: Mapping[InstanceState, float] = field(default_factory=dict)
    # (cloud, region, instance type) -> catalog offer: prices an orphan's rebuilt record
    offers: Mapping[tuple[str, str, str], Offer] = field(default_factory=dict)
    max_disagreements: int = 5
    sweep_approved: bool = False
    closed_window_s: float = 86_400.0  # closed records the store passes in (see `records`)
    # cloud -> its measured skew (the cloud's clock minus the controller's), seconds, and the
    # span the measurement puts it in
    skew_s: Mapping[str, float] = field(default_factory=dict)
    skew_span_s: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # instance id -> when the controller first saw it listed (the orphan grace counts from it)
    first_seen: Mapping[str, float] = field(default_factory=dict)
    # the earliest scale-up intent the store holds: nothing was requested before it (the floor
    # of an orphan's launch stamp when its own intent is not in view)
    first_request_ts: float | None = None
    # node_address=instance: NodeAddr is set from the cloud's answer and checked every pass
    set_addresses: bool = True
    # instance id -> the cloud's start stamp (its own clock) when first listed
    first_start: Mapping[str, float] = field(default_factory=dict)
    # instance id -> the spot warnings its node reported, and when its jobs were signalled
    warnings: Mapping[str, Sequence[SpotWarning]] = field(default_factory=dict)
    signalled: Mapping[str, float] = field(default_factory=dict)
    interruptions: Interruptions = field(default_factory=Interruptions)
    # record id -> when a complete listing first lacked its instance: a VM that vanished
    # without an end stamp (GCE forgets deleted VMs) is billed until then, not until the
    # sweep gets round to closing its record
    gone_since: Mapping[str, float] = field(default_factory=dict)
    # instance id -> the last pass whose listing showed it alive: a VM the controller itself
    # terminated that vanished with no end stamp stopped running by then, or at the call
    last_alive: Mapping[str, float] = field(default_factory=dict)
