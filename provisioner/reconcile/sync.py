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

Where the rules live: adoption in `sync_adoption`; the handler for each way the listing
disagrees with a live record in `sync_handlers`; the steps Slurm drives in `sync_lifecycle`;
the sweep in `sync_sweep`. They share one pass's `SyncView` (what it sees) and
`SyncPlanBuilder` (what it has decided, in order) from `sync_pass`.
"""

from __future__ import annotations

from provisioner.reconcile.cloud_stamps import REPLACED_MARGIN_S, CloudStamps
from provisioner.reconcile.sync_adoption import group_of, intent_capacity, plan_adoptions
from provisioner.reconcile.sync_handlers import handle_record
from provisioner.reconcile.sync_model import (
    JOINED,
    POWERED_OFF,
    TERMINABLE,
    Adopt,
    Bind,
    Kill,
    Move,
    NameNode,
    NodeFix,
    SyncInput,
    SyncPlan,
)
from provisioner.reconcile.sync_pass import SyncPlanBuilder, busy_nodes, free_nodes, open_view
from provisioner.reconcile.sync_records import orphan_record, owned_from_record
from provisioner.reconcile.sync_sweep import apply_sweep

# Names other code imports from here (they moved to the modules above).
__all__ = [
    "JOINED",
    "POWERED_OFF",
    "REPLACED_MARGIN_S",
    "TERMINABLE",
    "Adopt",
    "Bind",
    "CloudStamps",
    "Kill",
    "Move",
    "NameNode",
    "NodeFix",
    "SyncInput",
    "SyncPlan",
    "busy_nodes",
    "group_of",
    "intent_capacity",
    "orphan_record",
    "owned_from_record",
    "plan_adoptions",
    "plan_sync",
]


def plan_sync(inp: SyncInput) -> SyncPlan:
    """Adopt, then each live record (oldest first) against the listing and Slurm, then the
    sweep. One `CloudStamps` serves all three, so the warnings keep that order."""
    stamps = CloudStamps(inp.skew_s, inp.skew_span_s)
    adopt = plan_adoptions(
        inp.owned,
        inp.records,
        inp.intents,
        controller=inp.controller,
        now_ts=inp.now_ts,
        stamps=stamps,
        unknown_floor_ts=inp.now_ts - inp.closed_window_s,
    )
    view = open_view(inp, adopt)
    out = SyncPlanBuilder(stamps, adopt, free_nodes(view))
    for inst in sorted(view.live, key=lambda i: (i.launched_ts, i.instance_id)):
        handle_record(view, out, inst)
    if not view.fresh:
        return out.plan()  # a stale snapshot: no sweep, nothing Slurm's node states drive
    return out.plan(sweep_hold=apply_sweep(view, out))
