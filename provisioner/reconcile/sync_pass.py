"""One sync pass's state: what it sees (`SyncView`, fixed when the pass opens) and what it has
decided so far (`SyncPlanBuilder`, the one value every handler writes to). Handlers take both,
so the order they run in, not a shared closure, decides the order of the plan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from provisioner.act.ports import OwnedInstance
from provisioner.domain.instances import CloudInstance
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.records import StoredInstance
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.reconcile.cloud_stamps import CloudStamps
from provisioner.reconcile.sync_model import (
    OUT_OF_SERVICE,
    TERMINABLE,
    AddressMismatch,
    Adopt,
    Bind,
    Kill,
    Move,
    NameNode,
    NodeFix,
    SignalJobs,
    SyncInput,
    SyncPlan,
)
from provisioner.reconcile.sync_records import owned_from_record


def busy_nodes(snap: ClusterSnapshot) -> frozenset[str]:
    """Burst nodes Slurm shows running (or finishing) a job: never terminated under it."""
    busy = {name for j in snap.running for name in j.nodes}
    for n in snap.nodes:
        if n.kind is NodeKind.BURST and (
            n.gpus_alloc > 0 or n.state in (NodeState.ALLOCATED, NodeState.MIXED)
        ):
            busy.add(n.name)
    return frozenset(busy)


@dataclass(frozen=True, slots=True)
class SyncView:
    """The store's records (this pass's adoptions included), this controller's listing and
    Slurm's nodes, indexed for the handlers. `fresh`: the Slurm snapshot is not stale, so
    its node states may drive steps."""

    inp: SyncInput
    fresh: bool
    records: Sequence[StoredInstance]
    owned: Mapping[str, OwnedInstance]  # instance id -> listed instance of this controller
    nodes: Mapping[str, Node]  # Slurm node name -> node
    live: Sequence[CloudInstance]  # records not closed, in the store's order
    holders: frozenset[str]  # nodes a live record is bound to
    busy: frozenset[str]  # burst nodes running jobs (none when the snapshot is stale)
    # pool -> burst nodes running jobs that no record holds, in name order: an orphan of the
    # pool may be one of those machines, so none of the pool's orphans is terminated
    unheld_busy: Mapping[str, Sequence[str]]

    @property
    def now(self) -> float:
        return self.inp.now_ts

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.inp.snapshot


def open_view(inp: SyncInput, adopt: Sequence[Adopt]) -> SyncView:
    snap = inp.snapshot
    fresh = not snap.stale
    records = [*inp.records, *(StoredInstance(a.instance, intent_token=a.token) for a in adopt)]
    live = [r.instance for r in records if not r.instance.state.terminal]
    holders = frozenset(i.node_name for i in live if i.node_name)
    busy = busy_nodes(snap) if fresh else frozenset()
    unheld_busy: dict[str, list[str]] = {}
    for n in sorted(snap.nodes, key=lambda n: n.name):
        # A node still powering up runs on no machine yet, so no orphan can be under it.
        if (
            n.kind is NodeKind.BURST
            and n.name in busy
            and n.name not in holders
            and n.pool
            and n.state is not NodeState.POWERING_UP
        ):
            unheld_busy.setdefault(n.pool, []).append(n.name)
    return SyncView(
        inp=inp,
        fresh=fresh,
        records=records,
        owned={o.instance_id: o for o in inp.owned if o.controller == inp.controller},
        nodes={n.name: n for n in snap.nodes},
        live=live,
        holders=holders,
        busy=busy,
        unheld_busy=unheld_busy,
    )


def free_nodes(view: SyncView) -> dict[str, list[str]]:
    """Per pool, in name order, the nodes Slurm powers up that nobody holds yet (none on a
    stale snapshot: its node states may be old)."""
    out: dict[str, list[str]] = {}
    if not view.fresh:
        return out
    for n in sorted(view.snapshot.nodes, key=lambda n: n.name):
        if (
            n.kind is NodeKind.BURST
            and n.state is NodeState.POWERING_UP
            and n.name not in view.holders
            and n.pool
        ):
            out.setdefault(n.pool, []).append(n.name)
    return out


@dataclass(slots=True)
class SyncPlanBuilder:
    """What the pass has decided so far, in the order decided: the plan keeps that order."""

    stamps: CloudStamps  # translates cloud stamps; the warnings it gathers go in the plan
    adopt: tuple[Adopt, ...] = ()
    # pool -> powered-up nodes nobody holds yet; a bound instance takes the first
    free_nodes: dict[str, list[str]] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)
    kills: dict[str, Kill] = field(default_factory=dict)  # one per instance, the first wins
    binds: list[Bind] = field(default_factory=list)
    names: list[NameNode] = field(default_factory=list)
    fixes: dict[str, NodeFix] = field(default_factory=dict)  # node name -> its fix
    mismatches: list[AddressMismatch] = field(default_factory=list)
    orphans: list[CloudInstance] = field(default_factory=list)
    signals: list[SignalJobs] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # plan warnings of the handlers' own
    wake_at: float | None = None

    def wake_by(self, ts: float) -> None:
        """Ask for a pass no later than `ts`."""
        self.wake_at = ts if self.wake_at is None else min(self.wake_at, ts)

    def kill(
        self,
        view: SyncView,
        inst: CloudInstance,
        reason: str,
        *,
        fail: bool = False,
        join: bool = False,
        spot: bool = False,
    ) -> None:
        """Terminate a recorded instance (once); `fail` its node first where Slurm's view is
        fresh; `join`: it failed to join."""
        if inst.instance_id in self.kills:
            return
        o = view.owned.get(inst.instance_id) or owned_from_record(inst)
        node = inst.node_name if fail and view.fresh else ""
        self.kills[inst.instance_id] = Kill(
            inst.instance_id,
            o,
            reason,
            fail_node=node,
            transition=inst.state in TERMINABLE,
            join_failure=join,
            spot_warning=spot,
        )

    def fail_node(self, name: str, reason: str) -> None:
        self.fixes[name] = NodeFix(name, "fail", reason)

    def name_node(self, view: SyncView, inst: CloudInstance, node: str) -> None:
        """The instance learns which node it is from the cloud (its own metadata): named once
        it is listed with its address, and again if the cloud shows another name."""
        o = view.owned.get(inst.instance_id)
        if o is not None and o.private_ip and o.named_node != node:
            address = o.private_ip if view.inp.set_addresses else ""
            self.names.append(NameNode(o, node, address))

    def check_address(self, view: SyncView, inst: CloudInstance, node: Node) -> None:
        """A node in service whose NodeAddr is neither unset (its own name) nor its instance's
        private address is drained, once (a draining node is not checked again)."""
        o = view.owned.get(inst.instance_id)
        if (
            not view.inp.set_addresses
            or o is None
            or not o.private_ip
            or node.address in ("", node.name, o.private_ip)
            or node.state in OUT_OF_SERVICE
        ):
            return
        found = AddressMismatch(inst.instance_id, node.name, o.private_ip, node.address)
        self.mismatches.append(found)
        why = f"NodeAddr {node.address} is not {inst.instance_id}'s address {o.private_ip}"
        self.fixes[node.name] = NodeFix(node.name, "drain", why)

    def take_free_node(self, inst: CloudInstance) -> str:
        """Bind `inst` to its pool's first free node: that node's name, or "" if none."""
        queue = self.free_nodes.get(inst.pool)
        if not queue:
            return ""
        name = queue.pop(0)
        self.binds.append(Bind(inst.instance_id, name))
        return name

    def plan(self, sweep_hold: str = "") -> SyncPlan:
        return SyncPlan(
            adopt=self.adopt,
            bind=tuple(self.binds),
            names=tuple(self.names),
            moves=tuple(self.moves),
            kills=tuple(self.kills.values()),
            nodes=tuple(self.fixes.values()),
            mismatches=tuple(self.mismatches),
            orphans=tuple(self.orphans),
            sweep_hold=sweep_hold,
            warnings=(*self.stamps.warnings, *self.notes),
            signals=tuple(self.signals),
            wake_at=self.wake_at,
        )
