"""The planner: `plan(snapshot, policy, catalog, backoff, now) -> Plan`. Pure and deterministic.

One pass:
1. predict each pending job's on-prem start (slot model, queue order, see profile.py);
2. keep a job on-prem when its predicted wait is within its waiting budget (or shorter than the
   cloud's time to ready); urgent classes burst at once on on-demand capacity;
3. give the rest to burst capacity already requested or idle, then to new nodes: the offer with
   the lowest expected cost that passes back-off, pool max size and the hard budgets; CLOUD
   nodes Slurm powers up on its own (a job sent straight to a burst partition) get an instance
   through the same guardrails;
4. drain burst nodes idle past the idle timeout (Slurm and NVML agree), terminate drained ones and
   instances that never joined.

One module per method, as Karpenter keeps one per disruption method: `prediction` (1, 2),
`bursting` (3), `power_ups` (3, Slurm's own), `scale_down` (4), over the state they share
(`planning_pass`); this module only orders them.
"""

from __future__ import annotations

import math

from provisioner.config.models import Policy
from provisioner.domain.nodes import NodeKind
from provisioner.domain.plan import Plan, ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.plan.bursting import burst, capacity_in_flight
from provisioner.plan.catalog import Catalog
from provisioner.plan.planning_pass import PlanningPass, planned_runtime
from provisioner.plan.power_ups import slurm_power_ups
from provisioner.plan.prediction import hedge_fraction, predict
from provisioner.plan.profile import OnPremProfile
from provisioner.plan.rank_cache import RankCache
from provisioner.plan.scale_down import scale_down

__all__ = ["build_profile", "hedge_fraction", "plan"]


def build_profile(snapshot: ClusterSnapshot, policy: Policy, now: float) -> OnPremProfile:
    """The on-prem availability profile from the nodes and the running jobs' expected ends."""
    onprem = [n for n in snapshot.nodes if n.kind is NodeKind.ONPREM]
    onprem.sort(key=lambda n: (n.weight, n.name))
    caps = [n.gpus if n.state.usable else 0 for n in onprem]
    width = max([n.gpus for n in onprem] or [policy.onprem.gpus_per_node])
    prof = OnPremProfile(caps, now, width, tuple(n.name for n in onprem))
    index = {n.name: i for i, n in enumerate(onprem)}
    holds: dict[int, list[tuple[float, int]]] = {}  # node -> (end, GPUs) of its running jobs
    for job in snapshot.running:
        if not job.gpus:  # parts of GPUs only (MIG devices, shards): no whole GPU held
            continue
        if len(job.nodes) == 1:  # most jobs: skip building a list to find their node
            idx = index.get(job.nodes[0])
            on = [] if idx is None else [idx]
        else:
            on = [index[name] for name in job.nodes if name in index]
        if not on:
            continue
        start = job.start_ts if job.start_ts is not None else now
        # A job past its estimate is expected to end soon, not to have ended already.
        end = max(start + planned_runtime(job, policy), now + 60.0)
        per_node = max(1, math.ceil(job.gpus / len(on)))
        for idx in on:
            if caps[idx]:
                holds.setdefault(idx, []).append((end, min(per_node, caps[idx])))
    for idx, held in holds.items():
        prof.hold_from_start(idx, held)
    return prof


def _run(p: PlanningPass, profile: OnPremProfile | None) -> Plan:
    """The phases, in order: each adds its decisions and actions to the pass."""
    if p.snap.stale:
        p.decide(
            ReasonCode.BLOCKED_STALE_SNAPSHOT,
            (),
            detail={"reasons": "; ".join(p.snap.stale_reasons) or "stale snapshot"},
        )
        return Plan(p.now, (), tuple(p.decisions), {})
    prof = profile.copy() if profile is not None else build_profile(p.snap, p.policy, p.now)
    bursting = predict(p, prof)
    open_nodes = capacity_in_flight(p)
    burst(p, bursting, open_nodes)
    slurm_power_ups(p)
    claimed = {o.node_name for o in open_nodes if o.node_name and o.job_ids}
    scale_down(p, claimed)
    return Plan(p.now, tuple(p.actions), tuple(p.decisions), p.predicted)


def plan(
    snapshot: ClusterSnapshot,
    policy: Policy,
    catalog: Catalog,
    backoff: Backoff,
    now: float,
    *,
    onprem: OnPremProfile | None = None,
    ranks: RankCache | None = None,
) -> Plan:
    """Plan one pass. Pure: reads only its arguments and never mutates them, but for `ranks`,
    a memo of offer rankings the caller keeps across passes (see `RankCache`).

    `onprem` lets the simulator pass the slot profile it maintains incrementally instead of
    rebuilding it from the snapshot's running jobs on every event; it is copied, never changed.
    """
    return _run(PlanningPass(snapshot, policy, catalog, backoff, now, ranks), onprem)
