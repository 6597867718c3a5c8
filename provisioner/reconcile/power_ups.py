"""Slurm-driven mode: CLOUD nodes Slurm powers up on its own get an instance.

A job submitted straight to a burst partition (or placed by Slurm on another node than the one
in flight) makes Slurm power up a CLOUD node itself; the pass gives such a node an instance,
recorded as a `burst_urgent` decision with `detail.by = slurm`, through the same scale-up path
as the planner's bursts.
"""

from __future__ import annotations

import logging
from decimal import Decimal

from provisioner.act.specs import pool_capacities
from provisioner.config.models import Policy, PoolPolicy
from provisioner.domain.errors import CloudError, ProvisionerError
from provisioner.domain.instances import InstanceState
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.domain.plan import Alternative, Decision, ReasonCode, ScaleUp, decision_id
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.plan.ranking import Candidate, candidates_for, rank
from provisioner.reconcile.actuation import Actuator
from provisioner.reconcile.context import PassContext, PassReport
from provisioner.reconcile.snapshot_view import EffectivePolicy, placeholders

log = logging.getLogger("provisioner.loop")

S = InstanceState


def serve_power_ups(
    ctx: PassContext,
    actuator: Actuator,
    effective: EffectivePolicy,
    snap: ClusterSnapshot,
    now: float,
    report: PassReport,
) -> None:
    """Slurm-driven mode: burst nodes Slurm is powering up that no instance holds or can
    hold (no unbound instance of the pool, no launch still to be listed) get one, the
    cheapest offer of the node's pool that back-off, the pool's size and the global $/h cap
    allow. Paused bursting or a drained pool gets none: the node times out in Slurm."""
    if ctx.store.operator_state().paused:
        return
    live = ctx.store.instances(live_only=True)
    held = {si.instance.node_name for si in live if si.instance.node_name}
    spare: dict[str, int] = {}
    for si in live:
        if not si.instance.node_name and si.instance.state in (S.REQUESTED, S.ALLOCATED):
            spare[si.instance.pool] = spare.get(si.instance.pool, 0) + 1
    for ph in placeholders(ctx, live, now):
        spare[ph.pool] = spare.get(ph.pool, 0) + 1
    policy = effective.current()
    burn = sum((si.instance.price_usd_hr for si in live), Decimal(0))
    count = {p.name: 0 for p in policy.pools}
    for si in live:
        count[si.instance.pool] = count.get(si.instance.pool, 0) + 1
    jobs_on: dict[str, list[str]] = {}
    accounts: dict[str, str] = {}
    for j in snap.running:
        for n in j.nodes:
            jobs_on.setdefault(n, []).append(j.job_id)
            accounts.setdefault(n, j.account)
    for node in sorted(snap.nodes, key=lambda n: n.name):
        if node.kind is not NodeKind.BURST or node.state is not NodeState.POWERING_UP:
            continue
        if node.name in held or not node.pool:
            continue
        if spare.get(node.pool, 0) > 0:
            spare[node.pool] -= 1
            continue
        try:
            pool = policy.pool(node.pool)
        except KeyError:
            continue
        if count.get(pool.name, 0) + 1 > pool.max_nodes:
            continue
        cand = _cheapest(ctx, actuator.backoff, pool, node.gpus or 1, node.gpu_type, now)
        if cand is None:
            continue
        cap = policy.budgets.global_usd_per_hour
        if cap is not None and burn + cand.usd_hr > cap:
            continue
        job_ids = tuple(jobs_on.get(node.name, ()))
        expected = Decimal(
            repr(round(cand.expected_cost(_runtime(ctx.policy), ctx.policy.spot), 6))
        )
        d = Decision(
            decision_id(now, ReasonCode.BURST_URGENT, node.name, *job_ids),
            ReasonCode.BURST_URGENT,
            job_ids,
            chosen=cand.key,
            alternatives=(Alternative(cand.key, cand.usd_hr, expected, True),),
            team=ctx.policy.budgets.team_for(accounts.get(node.name, "")),
            detail={"by": "slurm", "node": node.name, "pool": pool.name},
        )
        ctx.store.record_decisions([d], now)
        su = ScaleUp(pool.name, cand.key, 1, cand.gpus_per_node, cand.usd_hr_per_node, job_ids, d)
        try:
            actuator.scale_up(su, snap, {}, now, report)
        except (CloudError, ProvisionerError) as exc:
            report.errors.append(f"scale-up for {node.name}: {exc}")
            continue
        burn += cand.usd_hr
        count[pool.name] = count.get(pool.name, 0) + 1
        log.info("slurm powers up %s: an instance was requested for it", node.name)


def _runtime(policy: Policy) -> float:
    return policy.waiting.default.default_runtime_s or policy.onprem.fallback_runtime_s


def _cheapest(
    ctx: PassContext, backoff: Backoff, pool: PoolPolicy, gpus: int, gpu_type: str, now: float
) -> Candidate | None:
    model = pool.gpu_model or gpu_type or ctx.policy.onprem.gpu_model
    cands = candidates_for(
        gpus,
        model,
        [pool],
        ctx.catalog,
        pool_capacities(pool),
        ctx.policy.spot,
        ctx.policy.onprem.equivalent_gpu_models,
    )
    for c in rank(cands, _runtime(ctx.policy), ctx.policy.spot):
        if c.nodes == 1 and c.gpus_per_node >= gpus and not backoff.blocked(c.key, now):
            return c
    return None
