"""The steps Slurm drives for a listed, live instance (a fresh snapshot only): binding it to the
node Slurm powers up, joining, ready, draining, and terminating it when Slurm is done with it
or gave up on it. One handler per stage of the record."""

from __future__ import annotations

from provisioner.domain.instances import (
    CloudInstance,
    InstanceOrigin,
    InstanceState,
    join_timed_out,
)
from provisioner.domain.nodes import Node, NodeState
from provisioner.reconcile.sync_model import JOINED, POWERED_OFF, Move, S
from provisioner.reconcile.sync_pass import SyncPlanBuilder, SyncView


def handle_slurm_steps(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, state: InstanceState
) -> None:
    """`state`: the record's state after this pass's cloud step (requested may now be
    allocated)."""
    if inst.origin is InstanceOrigin.ORPHAN and not inst.node_name:
        handle_unbound_orphan(view, out, inst)
        return
    node_name = inst.node_name
    if state in (S.REQUESTED, S.ALLOCATED) and not node_name:
        node_name = out.take_free_node(inst)
    if state in (S.ALLOCATED, S.JOINING) and node_name:
        out.name_node(view, inst, node_name)
    if state is S.ALLOCATED and node_name:
        out.moves.append(Move(inst.instance_id, S.JOINING, f"slurm powering up {node_name}"))
        return
    if not node_name and view.now - inst.launched_ts > view.inp.unbound_timeout_s:
        # Slurm never powered up a node this instance could serve: its jobs started
        # elsewhere (on-prem freed up first) and nothing else wants it.
        reason = f"slurm asked for no node in {view.inp.unbound_timeout_s:g} s"
        out.kill(view, inst, reason, join=True)
        return
    node = view.nodes.get(node_name) if node_name else None
    if node is not None and view.fresh and state in (S.JOINING, S.READY):
        out.check_address(view, inst, node)
    if state is S.JOINING:
        handle_joining(view, out, inst, node_name, node)
    elif state in (S.READY, S.DRAINING) and node is not None:
        handle_serving(view, out, inst, state, node)


def handle_unbound_orphan(view: SyncView, out: SyncPlanBuilder, inst: CloudInstance) -> None:
    """A record rebuilt from tags, bound to no node. While its pool has an unheld node running
    jobs it may be that machine: kept, and left unbound. Otherwise it is no node's machine, so
    it serves a node Slurm is powering up for jobs (a store restored from an older copy forgot
    the binding, and Slurm would fail the node at its ResumeTimeout), or goes."""
    if inst.pool in view.unheld_busy:
        return
    node_name = out.take_free_node(inst)
    if not node_name:
        out.kill(view, inst, "orphan: no slurm node of its pool runs jobs")
        return
    out.moves.append(Move(inst.instance_id, S.JOINING, f"orphan: serves {node_name}, powering up"))


def handle_joining(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, node_name: str, node: Node | None
) -> None:
    """Joining: ready once its node registers; terminated if the node goes down, Slurm powers
    it off, or the join timeout passes (a down or timed-out node is failed: its jobs requeue)."""
    if node is not None and node.state is NodeState.DRAINED:
        # drained (and idle: no job runs there) before it served: only Slurm drains a node
        # mid-join (the controller drains ready ones), as it does one that registers less than
        # its declaration says
        why = node.reason or "no reason given"
        out.kill(view, inst, f"slurm drained {node_name} as it joined: {why}", join=True)
    elif node is not None and node.state in JOINED:
        out.moves.append(Move(inst.instance_id, S.READY, f"{node_name} registered with slurm"))
    elif node is not None and node.state is NodeState.DOWN:
        out.kill(view, inst, f"{node_name} went down before joining", fail=True, join=True)
    elif node is not None and node.state in POWERED_OFF:
        out.kill(view, inst, f"slurm gave up on {node_name} before it joined", join=True)
    elif join_timed_out(inst, view.now, view.inp.join_timeout_s):
        reason = f"{node_name} did not join in {view.inp.join_timeout_s:g} s"
        out.kill(view, inst, reason, fail=True, join=True)


def handle_serving(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, state: InstanceState, node: Node
) -> None:
    """Ready or draining: terminated once Slurm powers its node off or drained it (Slurm is
    done with it), or the node is down (failed); a ready one whose node drains is draining."""
    if node.state in POWERED_OFF:
        out.kill(view, inst, f"{node.name} drained and powered down by slurm")
    elif node.state is NodeState.DOWN:
        out.kill(view, inst, f"{node.name} is down in slurm", fail=True)
    elif state is S.READY and node.state in (NodeState.DRAINING, NodeState.DRAINED):
        out.moves.append(Move(inst.instance_id, S.DRAINING, f"{node.name} draining in slurm"))
    elif state is S.DRAINING and node.state is NodeState.DRAINED:
        out.kill(view, inst, f"{node.name} drained")
