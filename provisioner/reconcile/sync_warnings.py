"""Spot warnings in a sync pass: what a live, listed record's warnings make of it.

An interruption notice or a preemption ends the instance inside the cloud's window:
1. the first pass that sees it (with a fresh Slurm view, and jobs on the node) drains the
   node and signals its running jobs, so they can checkpoint;
2. `checkpoint_s` later, and never later than `margin_s` before the VM goes, the node is
   failed (Slurm requeues its jobs) and the instance is terminated, which ends its record
   and its bill. A node with no jobs skips step 1.
A rebalance recommendation drains the node: no new work lands on it, its jobs finish, and it
goes the usual way of an idle node.

A report that did not come from the instance's own private address (where the cloud lists
one) is not acted on: any cluster member holds the munge key, but only this VM has this
address, so another machine cannot requeue its jobs. It is named in the plan's warnings.
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.act.ports import OwnedInstance
from provisioner.domain.instances import CloudInstance
from provisioner.domain.spot_warnings import SpotWarning, WarningKind
from provisioner.reconcile.sync_model import OUT_OF_SERVICE, NodeFix, SignalJobs
from provisioner.reconcile.sync_pass import SyncPlanBuilder, SyncView


def _from_instance(
    out: SyncPlanBuilder, o: OwnedInstance, warnings: Sequence[SpotWarning]
) -> list[SpotWarning]:
    """The warnings that came from the instance itself; the others are named and dropped."""
    kept: list[SpotWarning] = []
    for w in warnings:
        if o.private_ip and w.source and w.source != o.private_ip:
            out.notes.append(
                f"spot {w.kind} for {w.node} ({w.instance_id}) came from {w.source}, not the "
                f"instance's address {o.private_ip}: ignored"
            )
        else:
            kept.append(w)
    return kept


def _words(w: SpotWarning) -> str:
    if w.kind is WarningKind.PREEMPTION:
        return "GCE preemption notice"
    if w.kind is WarningKind.INTERRUPTION:
        return "AWS spot interruption notice"
    return "AWS rebalance recommendation"


def handle_warned(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, o: OwnedInstance
) -> bool:
    """Plan what the record's warnings call for. True when that is all this pass does with the
    record (its other steps wait, or it is being ended)."""
    warnings = _from_instance(out, o, view.inp.warnings.get(inst.instance_id, ()))
    node = inst.node_name
    if not warnings or not node:
        return False
    ending = [w for w in warnings if w.kind.ends_instance]
    if not ending:
        return _drain(view, out, node, warnings[0])
    w = ending[0]
    policy = view.inp.interruptions
    deadline = w.deadline_ts(view.inp.skew_s.get(o.cloud, 0.0))
    assert deadline is not None  # an ending warning always has one
    latest = deadline - policy.margin_s
    signalled = view.inp.signalled.get(inst.instance_id)
    reason = f"{_words(w)}: the VM goes at {deadline:.0f}"
    if signalled is None and view.fresh and node in view.busy and view.now < latest:
        out.signals.append(SignalJobs(inst.instance_id, node, policy.signal, reason))
        out.wake_by(min(view.now + policy.checkpoint_s, latest))
        return True
    due = latest if signalled is None else min(signalled + policy.checkpoint_s, latest)
    # wait while jobs may still checkpoint, or while Slurm's view is too stale to tell
    if view.now < due and (node in view.busy or not view.fresh):
        out.wake_by(due)
        return True
    out.kill(view, inst, reason, fail=True, spot=True)
    return True


def _drain(view: SyncView, out: SyncPlanBuilder, node: str, w: SpotWarning) -> bool:
    n = view.nodes.get(node)
    if view.fresh and n is not None and n.state not in OUT_OF_SERVICE and node not in out.fixes:
        out.fixes[node] = NodeFix(node, "drain", f"{_words(w)}: no new work on this node")
    return False


__all__ = ["handle_warned"]
