"""Slurm power-ups: a job submitted straight to a burst partition makes Slurm power up a CLOUD node
on its own. Such a node gets an instance only as any burst does: the cheapest offer of the node's
pool that passes every guardrail, the team's budget included. A node that unbound capacity of its
pool (booting, or a launch not listed yet) will take needs nothing new; a blocked one times out in
Slurm, which requeues its job.
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioner.config.models import PoolPolicy
from provisioner.domain.instances import InstanceOrigin, InstanceState
from provisioner.domain.jobs import Job
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType
from provisioner.domain.plan import ReasonCode, ScaleUp
from provisioner.plan.planning_pass import PlanningPass, planned_runtime
from provisioner.plan.ranking import Candidate, candidates_for, rank


@dataclass(frozen=True, slots=True)
class _PowerUp:
    """One CLOUD node Slurm is powering up, and what it is for."""

    node: Node
    pool: PoolPolicy
    jobs: list[Job]
    team: str

    @property
    def job_ids(self) -> tuple[str, ...]:
        return tuple(j.job_id for j in self.jobs)

    def where(self) -> dict[str, str]:
        return {"node": self.node.name, "pool": self.pool.name}


_BY_SLURM = {"by": "slurm"}


def slurm_power_ups(p: PlanningPass) -> None:
    """An instance, through every guardrail, for each CLOUD node Slurm powers up that nothing
    already bought will take."""
    powering = sorted(
        (n for n in p.snap.nodes if n.kind is NodeKind.BURST and n.state is NodeState.POWERING_UP),
        key=lambda n: n.name,
    )
    if not powering:
        return  # the common case: no need to map every job to its nodes
    held = {i.node_name for i in p.snap.instances if i.node_name and not i.state.terminal}
    spare = _unbound_by_pool(p)
    jobs_on = _jobs_on(p, {n.name for n in powering})
    pools = {pool.name: pool for pool in p.policy.pools}
    for node in powering:
        if node.name in held or node.pool not in pools:
            continue
        if spare.get(node.pool, 0) > 0:
            spare[node.pool] -= 1
            continue
        jobs = jobs_on.get(node.name, [])
        team = p.policy.budgets.team_for(jobs[0].account if jobs else "")
        up = _PowerUp(node, pools[node.pool], jobs, team)
        if p.snap.paused:
            p.decide(
                ReasonCode.BLOCKED_PAUSED,
                up.job_ids,
                team=team,
                detail=dict(_BY_SLURM),
                **up.where(),
            )
            continue
        _power_up(p, up)


def _unbound_by_pool(p: PlanningPass) -> dict[str, int]:
    """Per pool, the planned instances not yet bound to a node: a power-up may take one."""
    spare: dict[str, int] = {}
    for inst in p.snap.instances:
        if (
            not inst.node_name
            and inst.state in (InstanceState.REQUESTED, InstanceState.ALLOCATED)
            and inst.origin is InstanceOrigin.PLANNED
        ):
            spare[inst.pool] = spare.get(inst.pool, 0) + 1
    return spare


def _jobs_on(p: PlanningPass, wanted: set[str]) -> dict[str, list[Job]]:
    jobs_on: dict[str, list[Job]] = {}
    for job in (*p.snap.running, *p.snap.pending):
        for name in job.nodes:
            if name in wanted:
                jobs_on.setdefault(name, []).append(job)
    return jobs_on


def _ranked_for(p: PlanningPass, up: _PowerUp) -> tuple[list[Candidate], float]:
    """The pool's single-node offers that fit the node, ranked, and the runtime ranked with."""
    gpus = up.node.gpus or 1
    model = (up.pool.gpu_model or up.node.gpu_type or p.onprem_model).lower()
    runtime = max((planned_runtime(j, p.policy) for j in up.jobs), default=0.0) or (
        p.policy.waiting.default.default_runtime_s or p.policy.onprem.fallback_runtime_s
    )
    cands = candidates_for(
        gpus,
        model,
        (up.pool,),
        p.catalog,
        (CapacityType.ON_DEMAND, CapacityType.SPOT),
        p.policy.spot,
        p.policy.onprem.equivalent_gpu_models,
    )
    ranked = [
        c for c in rank(cands, runtime, p.policy.spot) if c.nodes == 1 and c.gpus_per_node >= gpus
    ]
    return ranked, runtime


def _power_up(p: PlanningPass, up: _PowerUp) -> None:
    ranked, runtime = _ranked_for(p, up)
    verdict = p.first_allowed(ranked, up.team, runtime, p.planned_nodes)
    headroom = {
        "global_headroom_usd_hr": p.budget.global_headroom(),
        "team_headroom_usd": p.budget.team_headroom.get(up.team),
    }
    if verdict.at < 0:
        p.decide(
            verdict.blocked or ReasonCode.BLOCKED_NO_OFFER,
            up.job_ids,
            alternatives=tuple(verdict.alternatives),
            team=up.team,
            detail=dict(_BY_SLURM),
            **headroom,
            **up.where(),
        )
        return
    chosen = ranked[verdict.at]
    expected = verdict.alternatives[-1].expected_cost_usd  # the chosen one's, priced just now
    p.budget.spend(chosen.usd_hr, up.team, expected)
    p.pool_nodes[up.pool.name] = p.pool_nodes.get(up.pool.name, 0) + 1
    p.planned_nodes += 1
    d = p.decide(
        ReasonCode.BURST_URGENT,
        up.job_ids,
        chosen=chosen.key,
        alternatives=tuple(verdict.alternatives),
        global_headroom_usd_hr=p.budget.global_headroom(),
        team_headroom_usd=p.budget.team_headroom.get(up.team),
        team=up.team,
        detail=dict(_BY_SLURM),
        **up.where(),
    )
    p.actions.append(
        ScaleUp(
            pool=up.pool.name,
            offer=chosen.key,
            nodes=1,
            gpus_per_node=chosen.gpus_per_node,
            usd_per_hour_per_node=chosen.usd_hr_per_node,
            job_ids=up.job_ids,
            decision=d,
            fallbacks=p.fallbacks(d, chosen, 1),
        )
    )
