"""Passive sync: bring the store (a cache of the world) in line with what the clouds and Slurm
report, before anything is planned. Pure: `plan_sync` takes the observations and returns what to
write and what to do; the loop applies it.

Three sources meet here:

* the clouds' listing of the instances carrying this controller's tags (`OwnedInstance`);
* the store's instance records (lifecycle state, bound Slurm node) and recent scale-up intents;
* the Slurm snapshot (burst nodes and their power-saving states).

Rules, per instance record (state: observation -> step):

* none: a tagged instance in the group a recent scale-up intent resized -> adopt it
  (`requested`, or `allocated` when the cloud reports it running);
* requested: the cloud reports it running -> allocated;
* requested/allocated without a node: Slurm powers up a node of the pool that nobody holds ->
  bind the instance to that node; allocated with a node -> joining; still without a node after
  `unbound_timeout_s` (its jobs started elsewhere, nothing else wants it) -> terminate;
* joining: the node registered (idle/mixed/allocated/draining) -> ready; the node is down, or
  the join timeout passed -> terminate, node marked failed (its jobs requeue);
* ready: the node is draining/drained -> draining;
* ready/draining: the node powers down or is powered down -> terminate (Slurm is done with it);
  the node is down -> terminate, node marked failed;
* any live state: the cloud shows it stopping/stopped (spot reclaim) -> failed, node marked
  failed, a stopped VM terminated;
* terminating: gone from the listing -> terminated; still listed after `retry_terminate_s` ->
  terminate again (idempotent).

Then the orphan sweep (`provisioner.act.sweep.plan_sweep`): tagged instances nobody adopts,
closed records whose VM lives on, records past their state's lease, live records whose VM is gone.
The sweep never kills a job:

* an orphan (tagged as ours, no record: a crash, or a store restored from an older copy) gets a
  record rebuilt from its tags (origin `orphan`, billed from the cloud's launch time, its own
  ledger kind). When Slurm shows burst nodes of its pool running jobs that no record holds, one
  of them may be this machine: those nodes are drained (their jobs finish, no new ones start)
  and the pool's orphans are kept until none of them runs a job. Otherwise an orphan is bound
  to a node of its pool Slurm is powering up (no machine runs that node yet), else terminated;
* a record past its lease whose node Slurm shows running a job is left alone;
* the safety valve: when the store and the clouds disagree about more than
  `max_disagreements` instances in one pass (orphans plus records whose VM is gone), the sweep
  terminates and closes nothing, and holds until an operator approves.
Burst nodes left DOWN or DRAINED with no live instance are returned to service (`resume`).

Slurm picks which powered-down CLOUD node a job lands on (it does not honour a node the
controller powered up), so instances are bound to the node Slurm resumes, not the reverse.

A stale snapshot: nothing driven by Slurm node states, no sweep, no node changes; only what the
clouds alone say (adoption, allocated, terminated) is applied.

Time (promise 5): every step is dated when the controller saw it, on its own clock; timeouts,
leases and the orphan grace count from there. A cloud's stamps (launch, termination) are on the
cloud's clock: they are translated by the cloud's measured skew and clamped into what the
controller saw (`provisioner.domain.cloud_clock.evidence_ts`), and kept beside the step as the
times billing starts and ends (`Transition.cloud_ts`). A stamp far outside (more than a minute)
is named in a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from provisioner.act.ports import (
    TAG_CAPACITY,
    TAG_DECISION,
    TAG_GROUP,
    CloudState,
    OwnedInstance,
)
from provisioner.act.sweep import SweepReason, plan_sweep
from provisioner.domain.cloud_clock import WARN_SKEW_S, Evidence, evidence_ts
from provisioner.domain.instances import (
    CloudInstance,
    InstanceOrigin,
    InstanceState,
    Transition,
    join_timed_out,
)
from provisioner.domain.intents import IntentKind, IntentStatus
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.domain.offers import CapacityType, Offer, OfferKey
from provisioner.domain.records import Intent, StoredInstance
from provisioner.domain.snapshot import ClusterSnapshot

S = InstanceState
JOINED = frozenset(
    {NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED, NodeState.DRAINING, NodeState.DRAINED}
)
POWERED_OFF = frozenset({NodeState.POWERING_DOWN, NodeState.POWERED_DOWN})
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


@dataclass(frozen=True, slots=True)
class NodeFix:
    node: str
    action: str  # "resume" (back to service) | "fail" (drain, requeue, down) | "drain"
    reason: str


@dataclass(frozen=True, slots=True)
class SyncPlan:
    adopt: tuple[Adopt, ...] = ()
    bind: tuple[Bind, ...] = ()
    moves: tuple[Move, ...] = ()
    kills: tuple[Kill, ...] = ()
    nodes: tuple[NodeFix, ...] = ()
    orphans: tuple[CloudInstance, ...] = ()  # records to create, rebuilt from cloud tags
    sweep_hold: str = ""  # the safety valve holds the sweep, and why
    warnings: tuple[str, ...] = ()  # cloud stamps far outside what the controller saw

    @property
    def empty(self) -> bool:
        return not (
            self.adopt or self.bind or self.moves or self.kills or self.nodes or self.orphans
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
    # record id -> when a complete listing first lacked its instance: a VM that vanished
    # without an end stamp (GCE forgets deleted VMs) is billed until then, not until the
    # sweep gets round to closing its record
    gone_since: Mapping[str, float] = field(default_factory=dict)
    # instance id -> the last pass whose listing showed it alive: a VM the controller itself
    # terminated that vanished with no end stamp stopped running by then, or at the call
    last_alive: Mapping[str, float] = field(default_factory=dict)


# The skew is measured to about a second (whole-second Date headers): a launch stamp less than
# this before a request is taken as launched for that request, not before it.
REPLACED_MARGIN_S = 5.0


class CloudStamps:
    """Cloud stamps turned into evidence, with a warning for each far outside. Where the
    measured skew is a span rather than a point (whole-second Date headers), every stamp is
    translated to the latest time the span allows: billing never starts before the cloud's
    start, whatever the measurement's error, and an end is never cut short (it is capped by
    when the controller saw it anyway). Durations are unchanged: both ends move alike."""

    def __init__(
        self,
        skew_s: Mapping[str, float],
        span_s: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        self.skew_s = skew_s
        self.span_s = span_s or {}
        self.warnings: list[str] = []

    def _skew(self, cloud: str) -> float:
        span = self.span_s.get(cloud)
        return span[0] if span is not None else self.skew_s.get(cloud, 0.0)

    def floor_for(self, o: OwnedInstance, requested: float, unknown_floor: float) -> float:
        """The earliest `o` may be billed from, asked for at `requested` as far as the store
        knows. A launch stamp well before that, on a cloud whose clock is measured, is a
        machine asked for earlier than the store remembers: its group's own replacement of an
        interrupted member, or one whose request went with a store restored from an older
        copy. Its stamp is billed, no earlier than `unknown_floor` (a day back). On a cloud
        not measured yet, such a stamp may be the cloud's clock: clamped to the request."""
        if o.launched_ts is None or o.cloud not in self.skew_s:
            return requested
        launched = o.launched_ts - self._skew(o.cloud)
        return unknown_floor if launched < requested - REPLACED_MARGIN_S else requested

    def __call__(
        self, o: OwnedInstance, cloud_ts: float | None, lo: float, hi: float, what: str
    ) -> Evidence:
        skew = self.skew_s.get(o.cloud, 0.0)
        ev = evidence_ts(cloud_ts, self._skew(o.cloud), lo, hi)
        if abs(ev.off_s) > WARN_SKEW_S:
            when = "in the future" if ev.off_s > 0 else "before it was requested"
            self.warnings.append(
                f"{o.cloud} instance {o.instance_id}: its {what} stamp lies {abs(ev.off_s):.0f} s "
                f"{when} (measured skew {skew:+.1f} s): billed from what the controller saw"
            )
        if o.stamp_error:
            self.warnings.append(f"{o.stamp_error}: billed from what the controller saw")
        return ev


def group_of(o: OwnedInstance) -> str:
    return o.group or o.tags.get(TAG_GROUP, "")


def intent_capacity(intent: Intent) -> int:
    """How many instances a scale-up intent launched (or may have: a pending one)."""
    if intent.status == "confirmed":
        return int(intent.result.get("added", intent.nodes) or 0)
    return int(intent.nodes or 0)


def plan_adoptions(
    owned: Sequence[OwnedInstance],
    records: Sequence[StoredInstance],
    intents: Sequence[Intent],
    *,
    controller: str,
    now_ts: float,
    stamps: CloudStamps | None = None,
    unknown_floor_ts: float | None = None,
) -> tuple[Adopt, ...]:
    """Match tagged instances the store does not know to the scale-up intents that launched
    them: same node group, the intent has room left, the decision tag preferred (moto lets the
    launch template's tag win over the group's, so the tag alone cannot be trusted)."""
    stamps = stamps or CloudStamps({})
    known = {r.instance.instance_id for r in records}
    used: dict[str, int] = {}
    for r in records:
        if r.intent_token:
            used[r.intent_token] = used.get(r.intent_token, 0) + 1
    by_group: dict[str, list[Intent]] = {}
    for it in intents:
        if it.kind != IntentKind.SCALE_UP or it.status == IntentStatus.FAILED:
            continue
        grp = it.scale_up_payload.group
        if grp:
            by_group.setdefault(grp, []).append(it)
    out: list[Adopt] = []
    fresh = sorted(
        (
            o
            for o in owned
            if o.controller == controller
            and o.instance_id not in known
            and o.state in (CloudState.PENDING, CloudState.RUNNING)
        ),
        key=lambda o: (o.launched_ts or 0.0, o.instance_id),
    )
    for o in fresh:
        cands = [
            it
            for it in by_group.get(group_of(o), [])
            if intent_capacity(it) - used.get(it.token, 0) > 0
        ]
        if not cands:
            continue
        tag = o.tags.get(TAG_DECISION, "")
        it = next((c for c in cands if c.decision_id == tag), cands[0])
        used[it.token] = used.get(it.token, 0) + 1
        # the group's replacement of an interrupted member, or a machine whose request a
        # restored store forgot, was asked for before the intent adopting it
        floor = unknown_floor_ts if unknown_floor_ts is not None else it.created_ts
        asked = stamps.floor_for(o, it.created_ts, floor)
        launch = stamps(o, o.launched_ts, asked, now_ts, "launch")
        out.append(Adopt(it.token, _adopted(o, it, now_ts, launch)))
    return tuple(out)


def _adopted(o: OwnedInstance, it: Intent, now_ts: float, launch: Evidence) -> CloudInstance:
    running = o.state is CloudState.RUNNING
    # Billing starts at the cloud's own launch stamp, translated and clamped: a crash between
    # the launch and this adoption must not lose the time in between (the soak found a tick
    # missing). That holds for a machine launched before the intent too: a group's replacement
    # of an interrupted one, adopted by a later intent, has run (and been billed) since its
    # launch. The step itself is dated now, when the controller saw it running.
    history = [Transition(None, S.REQUESTED, it.created_ts, f"scale-up intent {it.token[:8]}")]
    if running:
        history.append(
            Transition(
                S.REQUESTED,
                S.ALLOCATED,
                max(now_ts, it.created_ts),
                "cloud reports running",
                launch.ts,
            )
        )
    return CloudInstance(
        instance_id=o.instance_id,
        pool=it.pool,
        offer=OfferKey.parse(it.offer),
        gpu_model=it.scale_up_payload.gpu_model,
        gpus=it.scale_up_payload.gpus,
        price_usd_hr=it.price_usd_hr if it.price_usd_hr is not None else Decimal(0),
        state=S.ALLOCATED if running else S.REQUESTED,
        launched_ts=it.created_ts,
        decision_id=it.decision_id,
        history=tuple(history),
    )


def owned_from_record(inst: CloudInstance) -> OwnedInstance:
    """What a terminate call needs when the listing does not show the instance."""
    return OwnedInstance(
        instance_id=inst.instance_id,
        cloud=inst.offer.cloud,
        region=inst.offer.region,
        zone="",
        instance_type=inst.offer.instance_type,
        state=CloudState.RUNNING,
        launched_ts=inst.launched_ts,
    )


def plan_sync(inp: SyncInput) -> SyncPlan:
    now = inp.now_ts
    snap = inp.snapshot
    fresh_view = not snap.stale
    stamps = CloudStamps(inp.skew_s, inp.skew_span_s)
    adopt = plan_adoptions(
        inp.owned,
        inp.records,
        inp.intents,
        controller=inp.controller,
        now_ts=now,
        stamps=stamps,
        unknown_floor_ts=now - inp.closed_window_s,
    )
    records = [*inp.records, *(StoredInstance(a.instance, intent_token=a.token) for a in adopt)]
    owned = {o.instance_id: o for o in inp.owned if o.controller == inp.controller}
    nodes = {n.name: n for n in snap.nodes}
    live = [r.instance for r in records if not r.instance.state.terminal]
    holders = {i.node_name for i in live if i.node_name}

    moves: list[Move] = []
    kills: dict[str, Kill] = {}
    binds: list[Bind] = []
    fixes: dict[str, NodeFix] = {}
    orphans: list[CloudInstance] = []

    def kill(inst: CloudInstance, reason: str, *, fail: bool = False, join: bool = False) -> None:
        if inst.instance_id in kills:
            return
        o = owned.get(inst.instance_id) or owned_from_record(inst)
        node = inst.node_name if fail and fresh_view else ""
        kills[inst.instance_id] = Kill(
            inst.instance_id,
            o,
            reason,
            fail_node=node,
            transition=inst.state in TERMINABLE,
            join_failure=join,
        )

    busy = busy_nodes(snap) if fresh_view else frozenset()
    # Pools where Slurm runs jobs on burst nodes no record holds: an orphan there may be one
    # of those machines, so none of that pool's orphans is terminated.
    unheld_busy: dict[str, list[str]] = {}
    # A node still powering up runs on no machine yet, so no orphan can be under it.
    for n in sorted(snap.nodes, key=lambda n: n.name):
        if (
            n.kind is NodeKind.BURST
            and n.name in busy
            and n.name not in holders
            and n.pool
            and n.state is not NodeState.POWERING_UP
        ):
            unheld_busy.setdefault(n.pool, []).append(n.name)

    # Powered-up nodes nobody holds yet, per pool, in name order.
    free_nodes: dict[str, list[str]] = {}
    if fresh_view:
        for n in sorted(snap.nodes, key=lambda n: n.name):
            if (
                n.kind is NodeKind.BURST
                and n.state is NodeState.POWERING_UP
                and n.name not in holders
                and n.pool
            ):
                free_nodes.setdefault(n.pool, []).append(n.name)

    for inst in sorted(live, key=lambda i: (i.launched_ts, i.instance_id)):
        iid = inst.instance_id
        o = owned.get(iid)
        state = inst.state
        gone = o is None or o.state is CloudState.TERMINATED
        if gone:
            if state is S.TERMINATING and (inp.listing_complete or o is not None):
                end = _terminated_at(o, inst, inp, stamps)
                moves.append(Move(iid, S.TERMINATED, "gone from the cloud", end))
            elif o is not None:
                # The cloud itself says it terminated it (a spot reclaim): fail it now, and
                # release its slot so its group does not launch a replacement nobody asked for
                # (the terminate call shrinks the group; an already-gone id is a no-op).
                ended = stamps(o, o.ended_ts, inst.launched_ts, now, "termination")
                moves.append(Move(iid, S.FAILED, "interrupted: the cloud terminated it", ended.ts))
                if inst.node_name and fresh_view:
                    fixes[inst.node_name] = NodeFix(inst.node_name, "fail", "cloud instance lost")
                kills[iid] = Kill(iid, o, "release the slot of an interrupted instance",
                                  transition=False)  # fmt: skip
            continue  # not listed at all: the sweep closes it after the grace period
        assert o is not None
        if o.state in (CloudState.STOPPING, CloudState.STOPPED) and state is not S.TERMINATING:
            moves.append(Move(iid, S.FAILED, f"interrupted: the cloud reports it {o.state}"))
            if inst.node_name and fresh_view:
                fixes[inst.node_name] = NodeFix(inst.node_name, "fail", "cloud instance lost")
            if o.state is CloudState.STOPPED:
                kills[iid] = Kill(iid, o, "stopped by the cloud", transition=False)
            continue
        if state is S.TERMINATING:
            if now - inst.entered_state_ts >= inp.retry_terminate_s:
                kills[iid] = Kill(iid, o, "still listed: terminate again", transition=False)
            continue
        if state is S.REQUESTED and o.state is CloudState.RUNNING:
            launch = stamps(o, o.launched_ts, inst.launched_ts, now, "launch")
            moves.append(Move(iid, S.ALLOCATED, "cloud reports running", launch.ts))
            state = S.ALLOCATED
        if not fresh_view:
            continue
        node_name = inst.node_name
        if inst.origin is InstanceOrigin.ORPHAN and not node_name:
            # Rebuilt from tags. While its pool has an unheld node running jobs it may be that
            # machine: kept, and left unbound. Otherwise it is no node's machine, so it serves
            # a node Slurm is powering up for jobs (a store restored from an older copy forgot
            # the binding, and Slurm would fail the node at its ResumeTimeout), or goes.
            if inst.pool in unheld_busy:
                continue
            queue = free_nodes.get(inst.pool)
            if not queue:
                kill(inst, "orphan: no slurm node of its pool runs jobs")
                continue
            node_name = queue.pop(0)
            binds.append(Bind(iid, node_name))
            moves.append(Move(iid, S.JOINING, f"orphan: serves {node_name}, powering up"))
            continue
        if state in (S.REQUESTED, S.ALLOCATED) and not node_name:
            queue = free_nodes.get(inst.pool)
            if queue:
                node_name = queue.pop(0)
                binds.append(Bind(iid, node_name))
        if state is S.ALLOCATED and node_name:
            moves.append(Move(iid, S.JOINING, f"slurm powering up {node_name}"))
            continue
        if not node_name and now - inst.launched_ts > inp.unbound_timeout_s:
            # Slurm never powered up a node this instance could serve: its jobs started
            # elsewhere (on-prem freed up first) and nothing else wants it.
            kill(inst, f"slurm asked for no node in {inp.unbound_timeout_s:g} s", join=True)
            continue
        node = nodes.get(node_name) if node_name else None
        if state is S.JOINING:
            if node is not None and node.state in JOINED:
                moves.append(Move(iid, S.READY, f"{node_name} registered with slurm"))
            elif node is not None and node.state is NodeState.DOWN:
                kill(inst, f"{node_name} went down before joining", fail=True, join=True)
            elif node is not None and node.state in POWERED_OFF:
                kill(inst, f"slurm gave up on {node_name} before it joined", join=True)
            elif join_timed_out(inst, now, inp.join_timeout_s):
                kill(
                    inst,
                    f"{node_name} did not join in {inp.join_timeout_s:g} s",
                    fail=True,
                    join=True,
                )
            continue
        if state in (S.READY, S.DRAINING) and node is not None:
            if node.state in POWERED_OFF:
                kill(inst, f"{node.name} drained and powered down by slurm")
            elif node.state is NodeState.DOWN:
                kill(inst, f"{node.name} is down in slurm", fail=True)
            elif state is S.READY and node.state in (NodeState.DRAINING, NodeState.DRAINED):
                moves.append(Move(iid, S.DRAINING, f"{node.name} draining in slurm"))
            elif state is S.DRAINING and node.state is NodeState.DRAINED:
                kill(inst, f"{node.name} drained")

    if fresh_view:
        timeouts = dict(inp.timeouts)
        # A record that moved in this pass made progress: its lease restarts now.
        stepped: dict[str, list[Move]] = {}
        for m in moves:
            stepped.setdefault(m.instance_id, []).append(m)
        in_view = []
        for r in records:
            inst = r.instance
            for m in stepped.get(inst.instance_id, ()):
                inst = inst.transition(m.to, now, m.reason, cloud_ts=m.cloud_ts)
            in_view.append(inst)
        sweep = plan_sweep(
            list(owned.values()),
            in_view,
            controller=inp.controller,
            now_ts=now,
            grace_s=inp.grace_s,
            timeouts=timeouts or None,
            listing_complete=inp.listing_complete,
            busy_nodes=busy,
            first_seen=inp.first_seen,
        )
        by_id = {r.instance.instance_id: r.instance for r in records}
        found = [t.instance for t in sweep.terminate if t.reason is SweepReason.ORPHAN]
        disagree = len(found) + len(sweep.close)
        if disagree > inp.max_disagreements and not inp.sweep_approved:
            hold = (
                f"the store and the clouds disagree about {disagree} instances "
                f"({len(found)} in the cloud with no record, {len(sweep.close)} recorded but "
                f"gone), more than the {inp.max_disagreements} allowed: nothing is terminated "
                "or closed until an operator approves (POST /v1/operator/sweep/approve)"
            )
            return SyncPlan(
                adopt=adopt,
                bind=tuple(binds),
                moves=tuple(moves),
                kills=tuple(kills.values()),
                nodes=tuple(fixes.values()),
                sweep_hold=hold,
                warnings=tuple(stamps.warnings),
            )
        known = {r.instance.instance_id for r in records}
        for o in owned.values():
            # ended before the store learnt of it (a crash, a store restored from an older
            # copy): its running time is still owed, so it gets a closed record
            if (
                o.state is CloudState.TERMINATED
                and o.instance_id not in known
                and o.ended_ts is not None
                and o.ended_ts - inp.skew_s.get(o.cloud, 0.0) >= now - inp.closed_window_s
            ):
                orphans.append(orphan_record(o, inp.offers, now, stamps, _asked(o, inp, stamps)))
        for o in found:
            orphans.append(orphan_record(o, inp.offers, now, stamps, _asked(o, inp, stamps)))
            if o.pool in unheld_busy:
                for name in unheld_busy[o.pool]:
                    if nodes[name].state is not NodeState.DRAINING:
                        fixes.setdefault(
                            name,
                            NodeFix(name, "drain", "burst node with no instance record: drain"),
                        )
            elif not free_nodes.get(o.pool):
                # (with a node of its pool powering up and nobody to serve it, it is kept: the
                # next pass binds its record to that node)
                kills[o.instance_id] = Kill(o.instance_id, o, "sweep: orphan")
        for t in sweep.terminate:
            rec = by_id.get(t.instance.instance_id)
            if t.instance.instance_id in kills or t.reason is SweepReason.ORPHAN:
                continue
            if rec is not None and rec.origin is InstanceOrigin.ORPHAN and rec.pool in unheld_busy:
                continue  # may be the machine under one of those busy nodes
            kills[t.instance.instance_id] = Kill(
                t.instance.instance_id,
                t.instance,
                f"sweep: {t.reason}",
                fail_node=rec.node_name if rec is not None and rec.node_name else "",
                transition=rec is not None and rec.state in TERMINABLE,
                join_failure=t.reason is SweepReason.LEASE_EXPIRED
                and rec is not None
                and rec.state in (S.REQUESTED, S.ALLOCATED, S.JOINING),
            )
        moved = {m.instance_id for m in moves}
        for c in sweep.close:
            if c.instance_id in moved or c.instance_id in kills:
                continue
            rec = by_id.get(c.instance_id)
            vanished = inp.gone_since.get(c.instance_id)
            moves.append(Move(c.instance_id, S.FAILED, f"sweep: {c.reason}", vanished))
            if rec is not None and rec.node_name:
                fixes.setdefault(
                    rec.node_name, NodeFix(rec.node_name, "fail", "cloud instance gone")
                )
        # Burst nodes left down/drained with nothing behind them go back to service.
        still_held = {
            i.node_name
            for i in live
            if i.node_name and i.instance_id not in {m.instance_id for m in moves if m.to.terminal}
        }
        for n in sorted(snap.nodes, key=lambda n: n.name):
            if n.kind is not NodeKind.BURST or n.name in still_held or n.name in fixes:
                continue
            if n.state in (NodeState.DOWN, NodeState.DRAINED):
                fixes[n.name] = NodeFix(n.name, "resume", "no cloud instance behind it")
    return SyncPlan(
        adopt=adopt,
        bind=tuple(binds),
        moves=tuple(moves),
        kills=tuple(kills.values()),
        nodes=tuple(fixes.values()),
        orphans=tuple(orphans),
        warnings=tuple(stamps.warnings),
    )


def _terminated_at(
    o: OwnedInstance | None, inst: CloudInstance, inp: SyncInput, stamps: CloudStamps
) -> float:
    """When an instance this controller terminated stopped running: the cloud's end stamp
    where it gave one (EC2 lists terminated instances for a while), no earlier than the
    terminate call; else (GCE forgets a deleted VM) the call itself, or the last pass that
    still listed it alive after it. Never when the controller noticed it missing: a pass that
    could not list (a kill, a throttled listing) would bill time the cloud did not."""
    called = inst.entered_state_ts
    if o is not None and o.ended_ts is not None:
        return stamps(o, o.ended_ts, called, inp.now_ts, "termination").ts
    return min(inp.now_ts, max(called, inp.last_alive.get(inst.instance_id, called)))


def _asked(o: OwnedInstance, inp: SyncInput, stamps: CloudStamps) -> float:
    """The earliest an orphan may be billed from: when it was asked for, as far as the store
    knows (its decision's intent where in view, else the store's first intent, else a day
    back), or earlier on a measured cloud's stamp (`CloudStamps.floor_for`)."""
    day_back = inp.now_ts - inp.closed_window_s
    tag = o.tags.get(TAG_DECISION, "")
    mine = [it.created_ts for it in inp.intents if tag and it.decision_id == tag]
    if mine:
        requested = min(mine)
    elif inp.first_request_ts is not None:
        requested = inp.first_request_ts
    else:
        requested = day_back
    return stamps.floor_for(o, requested, day_back)


def busy_nodes(snap: ClusterSnapshot) -> frozenset[str]:
    """Burst nodes Slurm shows running (or finishing) a job: never terminated under it."""
    busy = {name for j in snap.running for name in j.nodes}
    for n in snap.nodes:
        if n.kind is NodeKind.BURST and (
            n.gpus_alloc > 0 or n.state in (NodeState.ALLOCATED, NodeState.MIXED)
        ):
            busy.add(n.name)
    return frozenset(busy)


def orphan_record(
    o: OwnedInstance,
    offers: Mapping[tuple[str, str, str], Offer],
    now_ts: float,
    stamps: CloudStamps | None = None,
    asked_ts: float | None = None,
) -> CloudInstance:
    """The record of a tagged instance the store does not know, rebuilt from its tags and the
    catalog: found now, billed from the cloud's own launch stamp (translated, and no earlier
    than `asked_ts`, the earliest it can have been asked for) to its termination stamp."""
    stamps = stamps or CloudStamps({})
    lo = now_ts if asked_ts is None else min(asked_ts, now_ts)
    launch = stamps(o, o.launched_ts, lo, now_ts, "launch")
    capacity = CapacityType.SPOT if o.tags.get(TAG_CAPACITY) == "spot" else CapacityType.ON_DEMAND
    offer = offers.get((o.cloud, o.region, o.instance_type))
    price = offer.price(capacity) if offer is not None else None
    if price is None and offer is not None:
        price = offer.ondemand_usd_hr  # no spot price listed: bill the upper bound
    why = f"orphan: found in the cloud by its tags with no record (at {now_ts:.0f})"
    history = [Transition(None, S.ALLOCATED, now_ts, why, launch.ts)]
    if o.state is CloudState.TERMINATED and o.ended_ts is not None:
        end = stamps(o, o.ended_ts, launch.ts, now_ts, "termination")
        history.append(
            Transition(S.ALLOCATED, S.TERMINATED, now_ts, "terminated in the cloud", end.ts)
        )
    return CloudInstance(
        instance_id=o.instance_id,
        pool=o.pool,
        offer=OfferKey(o.cloud, o.region, o.instance_type, capacity),
        gpu_model=offer.gpu_model if offer is not None else "",
        gpus=offer.whole_gpus if offer is not None else 0,
        price_usd_hr=price if price is not None else Decimal(0),
        state=history[-1].to_state,
        launched_ts=launch.ts,
        decision_id=o.tags.get(TAG_DECISION, ""),
        history=tuple(history),
        origin=InstanceOrigin.ORPHAN,
    )
