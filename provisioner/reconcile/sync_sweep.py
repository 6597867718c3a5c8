"""The orphan sweep's verdicts applied to the pass (a fresh snapshot only; see
`provisioner.act.sweep`): instances the cloud lists that no record holds, records past their
lease, records whose VM is gone, and burst nodes left down with nothing behind them. The
safety valve holds all of it when the store and the clouds disagree too much."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from provisioner.act.ports import CloudState, OwnedInstance
from provisioner.act.sweep import SweepPlan, SweepReason, plan_sweep
from provisioner.domain.instances import CloudInstance, InstanceOrigin
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.reconcile.sync_model import TERMINABLE, Kill, Move, NodeFix, S
from provisioner.reconcile.sync_pass import SyncPlanBuilder, SyncView
from provisioner.reconcile.sync_records import asked_at, orphan_record


@dataclass(frozen=True, slots=True)
class SweepFindings:
    sweep: SweepPlan
    found: tuple[OwnedInstance, ...]  # listed as ours with no record, in the sweep's order
    by_id: Mapping[str, CloudInstance]  # the pass's records (before its steps), by id

    @property
    def disagreements(self) -> int:
        return len(self.found) + len(self.sweep.close)


def apply_sweep(view: SyncView, out: SyncPlanBuilder) -> str:
    """Apply the sweep to `out`; the safety valve's reason where it holds (then nothing)."""
    findings = find(view, out)
    hold = hold_reason(view, findings)
    if hold:
        return hold
    record_ended_unseen(view, out)
    handle_found_orphans(view, out, findings)
    handle_sweep_terminations(view, out, findings)
    handle_sweep_closes(view, out, findings)
    resume_unbacked_nodes(view, out)
    return ""


def find(view: SyncView, out: SyncPlanBuilder) -> SweepFindings:
    # A record that moved in this pass made progress: its lease restarts now.
    stepped: dict[str, list[Move]] = {}
    for m in out.moves:
        stepped.setdefault(m.instance_id, []).append(m)
    in_view = []
    for r in view.records:
        inst = r.instance
        for m in stepped.get(inst.instance_id, ()):
            inst = inst.transition(m.to, view.now, m.reason, cloud_ts=m.cloud_ts)
        in_view.append(inst)
    inp = view.inp
    sweep = plan_sweep(
        list(view.owned.values()),
        in_view,
        controller=inp.controller,
        now_ts=view.now,
        grace_s=inp.grace_s,
        timeouts=dict(inp.timeouts) or None,
        listing_complete=inp.listing_complete,
        busy_nodes=view.busy,
        first_seen=inp.first_seen,
    )
    return SweepFindings(
        sweep=sweep,
        found=tuple(t.instance for t in sweep.terminate if t.reason is SweepReason.ORPHAN),
        by_id={r.instance.instance_id: r.instance for r in view.records},
    )


def hold_reason(view: SyncView, f: SweepFindings) -> str:
    """The safety valve: more disagreements than allowed, and no operator's approval."""
    allowed = view.inp.max_disagreements
    if f.disagreements <= allowed or view.inp.sweep_approved:
        return ""
    return (
        f"the store and the clouds disagree about {f.disagreements} instances "
        f"({len(f.found)} in the cloud with no record, {len(f.sweep.close)} recorded but "
        f"gone), more than the {allowed} allowed: nothing is terminated "
        "or closed until an operator approves (POST /v1/operator/sweep/approve)"
    )


def record_ended_unseen(view: SyncView, out: SyncPlanBuilder) -> None:
    """Listed as terminated with no record: it ended before the store learnt of it (a crash, a
    store restored from an older copy), and its running time is still owed, so it gets a
    closed record (within the window of closed records the store passes in)."""
    inp = view.inp
    known = {r.instance.instance_id for r in view.records}
    for o in view.owned.values():
        if (
            o.state is CloudState.TERMINATED
            and o.instance_id not in known
            and o.ended_ts is not None
            and o.ended_ts - inp.skew_s.get(o.cloud, 0.0) >= view.now - inp.closed_window_s
        ):
            out.orphans.append(_rebuilt(view, out, o))


def handle_found_orphans(view: SyncView, out: SyncPlanBuilder, f: SweepFindings) -> None:
    """Listed alive with no record: recorded from its tags. Where its pool has unheld nodes
    running jobs it may be under one: those nodes drain and it is kept. With a node of its
    pool powering up and nobody to serve it, it is kept too (the next pass binds it there).
    Otherwise it is terminated."""
    for o in f.found:
        out.orphans.append(_rebuilt(view, out, o))
        if o.pool in view.unheld_busy:
            for name in view.unheld_busy[o.pool]:
                if view.nodes[name].state is not NodeState.DRAINING:
                    out.fixes.setdefault(
                        name, NodeFix(name, "drain", "burst node with no instance record: drain")
                    )
        elif not out.free_nodes.get(o.pool):
            out.kills[o.instance_id] = Kill(o.instance_id, o, "sweep: orphan")


def handle_sweep_terminations(view: SyncView, out: SyncPlanBuilder, f: SweepFindings) -> None:
    """Records past their lease, and closed records whose VM lives on: terminated, unless
    already killed this pass or an orphan's record that may be under a busy unheld node."""
    for t in f.sweep.terminate:
        iid = t.instance.instance_id
        rec = f.by_id.get(iid)
        if iid in out.kills or t.reason is SweepReason.ORPHAN:
            continue
        if rec is not None and rec.origin is InstanceOrigin.ORPHAN and rec.pool in view.unheld_busy:
            continue  # may be the machine under one of those busy nodes
        out.kills[iid] = Kill(
            iid,
            t.instance,
            f"sweep: {t.reason}",
            fail_node=rec.node_name if rec is not None and rec.node_name else "",
            transition=rec is not None and rec.state in TERMINABLE,
            join_failure=t.reason is SweepReason.LEASE_EXPIRED
            and rec is not None
            and rec.state in (S.REQUESTED, S.ALLOCATED, S.JOINING),
        )


def handle_sweep_closes(view: SyncView, out: SyncPlanBuilder, f: SweepFindings) -> None:
    """Live records whose VM is gone: failed, billed until a complete listing first lacked it,
    their node failed. Not one this pass already stepped or is terminating."""
    moved = {m.instance_id for m in out.moves}  # before this loop adds any
    for c in f.sweep.close:
        if c.instance_id in moved or c.instance_id in out.kills:
            continue
        rec = f.by_id.get(c.instance_id)
        vanished = view.inp.gone_since.get(c.instance_id)
        out.moves.append(Move(c.instance_id, S.FAILED, f"sweep: {c.reason}", vanished))
        if rec is not None and rec.node_name:
            out.fixes.setdefault(
                rec.node_name, NodeFix(rec.node_name, "fail", "cloud instance gone")
            )


def resume_unbacked_nodes(view: SyncView, out: SyncPlanBuilder) -> None:
    """Burst nodes left down/drained with nothing behind them go back to service."""
    closing = {m.instance_id for m in out.moves if m.to.terminal}
    still_held = {i.node_name for i in view.live if i.node_name and i.instance_id not in closing}
    for n in sorted(view.snapshot.nodes, key=lambda n: n.name):
        if n.kind is not NodeKind.BURST or n.name in still_held or n.name in out.fixes:
            continue
        if n.state in (NodeState.DOWN, NodeState.DRAINED):
            out.fixes[n.name] = NodeFix(n.name, "resume", "no cloud instance behind it")


def _rebuilt(view: SyncView, out: SyncPlanBuilder, o: OwnedInstance) -> CloudInstance:
    return orphan_record(
        o, view.inp.offers, view.now, out.stamps, asked_at(o, view.inp, out.stamps)
    )
