"""The per-record handlers: one for each way the cloud's listing can disagree with a live
record (gone from it, terminated, stopped, still listed while being terminated, listed and
running). `handle_record` picks the one that applies; a listed, live instance then goes on to
the steps Slurm drives (`sync_lifecycle`)."""

from __future__ import annotations

from provisioner.act.ports import CloudState, OwnedInstance
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.reconcile.sync_lifecycle import handle_slurm_steps
from provisioner.reconcile.sync_model import Kill, Move, S
from provisioner.reconcile.sync_pass import SyncPlanBuilder, SyncView
from provisioner.reconcile.sync_records import terminated_at
from provisioner.reconcile.sync_warnings import handle_warned

_STOPPED = (CloudState.STOPPING, CloudState.STOPPED)


def handle_record(view: SyncView, out: SyncPlanBuilder, inst: CloudInstance) -> None:
    """Route one live record to the handler for what the listing says of its instance."""
    o = view.owned.get(inst.instance_id)
    if o is None:
        handle_vanished(view, out, inst)
    elif o.state is CloudState.TERMINATED:
        handle_cloud_terminated(view, out, inst, o)
    elif o.state in _STOPPED and inst.state is not S.TERMINATING:
        handle_cloud_stopped(view, out, inst, o)
    elif inst.state is S.TERMINATING:
        handle_still_listed(view, out, inst, o)
    elif started_again(view, inst, o):
        handle_started_again(view, out, inst, o)
    elif not handle_warned(view, out, inst, o):
        handle_listed(view, out, inst, o)


def handle_vanished(view: SyncView, out: SyncPlanBuilder, inst: CloudInstance) -> None:
    """Not listed at all. Only a complete listing shows a terminated one is gone; any other
    record is closed by the sweep after the grace period (a listing can miss a live VM)."""
    if inst.state is S.TERMINATING and view.inp.listing_complete:
        _terminated(view, out, inst, None)


def handle_cloud_terminated(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, o: OwnedInstance
) -> None:
    """Listed as terminated: the end of a terminate call, or the cloud's own doing."""
    if inst.state is S.TERMINATING:
        _terminated(view, out, inst, o)
        return
    # The cloud itself says it terminated it (a spot reclaim): fail it now, and release its
    # slot so its group does not launch a replacement nobody asked for (the terminate call
    # shrinks the group; an already-gone id is a no-op).
    iid = inst.instance_id
    ended = out.stamps(o, o.ended_ts, inst.launched_ts, view.now, "termination")
    out.moves.append(Move(iid, S.FAILED, "interrupted: the cloud terminated it", ended.ts))
    if inst.node_name and view.fresh:
        out.fail_node(inst.node_name, "cloud instance lost")
    out.kills[iid] = Kill(iid, o, "release the slot of an interrupted instance", transition=False)


def handle_cloud_stopped(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, o: OwnedInstance
) -> None:
    """Listed as stopping or stopped (a spot reclaim that stops): failed, its node with it; a
    stopped VM still holds its disk and slot, so it is terminated."""
    iid = inst.instance_id
    out.moves.append(Move(iid, S.FAILED, f"interrupted: the cloud reports it {o.state}"))
    if inst.node_name and view.fresh:
        out.fail_node(inst.node_name, "cloud instance lost")
    if o.state is CloudState.STOPPED:
        out.kills[iid] = Kill(iid, o, "stopped by the cloud", transition=False)


# A start this much later than the first one listed under the same id is another machine, or
# the same one booted again (a cloud's stamps of one start do not move).
STARTED_AGAIN_S = 60.0


def started_again(view: SyncView, inst: CloudInstance, o: OwnedInstance) -> bool:
    """The cloud lists the instance with a start well after the one it was first listed with
    (both on the cloud's own clock): a managed group recreated a preempted VM under the same
    name (GCE), or the VM was stopped and started again. The machine the record stood for,
    with its node's work, is gone. A controller that restarts takes the start it lists first."""
    first = view.inp.first_start.get(inst.instance_id)
    if first is None or o.launched_ts is None:
        return False
    return o.launched_ts > first + STARTED_AGAIN_S


def handle_started_again(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, o: OwnedInstance
) -> None:
    """Fail the record's node (its jobs requeue) and end the machine now under that name:
    nobody asked for it, and it never joined as the record's node (the planner buys again if
    the work needs it). The record bills on until that machine is gone: a cloud that reuses
    the name (GCE) keeps no end stamp for the one before, so the gap between the two is billed
    rather than the second machine's seconds lost."""
    out.kill(view, inst, "the cloud started another machine under its name (preempted)", fail=True)


def handle_still_listed(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, o: OwnedInstance
) -> None:
    """Being terminated but still listed alive: terminate again (idempotent) once the last
    call had time to take."""
    if view.now - inst.entered_state_ts >= view.inp.retry_terminate_s:
        out.kills[inst.instance_id] = Kill(
            inst.instance_id, o, "still listed: terminate again", transition=False
        )


def handle_listed(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, o: OwnedInstance
) -> None:
    """Listed alive. The cloud alone says a requested one runs; the rest of its steps follow
    Slurm's node states, which only a fresh snapshot may drive."""
    state: InstanceState = inst.state
    if state is S.REQUESTED and o.state is CloudState.RUNNING:
        launch = out.stamps(o, o.launched_ts, inst.launched_ts, view.now, "launch")
        out.moves.append(Move(inst.instance_id, S.ALLOCATED, "cloud reports running", launch.ts))
        state = S.ALLOCATED
    if view.fresh:
        handle_slurm_steps(view, out, inst, state)


def _terminated(
    view: SyncView, out: SyncPlanBuilder, inst: CloudInstance, o: OwnedInstance | None
) -> None:
    end = terminated_at(o, inst, view.inp, out.stamps)
    out.moves.append(Move(inst.instance_id, S.TERMINATED, "gone from the cloud", end))
