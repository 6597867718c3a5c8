"""Bursting: give the jobs that will not stay on-prem to burst capacity already requested or idle,
then to new nodes: the offer with the lowest expected cost that passes back-off, the pool's max
size and the hard budgets. Jobs whose every pool is full share one decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from provisioner.config.models import MigLayout, PoolPolicy
from provisioner.domain.errors import UnknownName
from provisioner.domain.gpu_share import ShareRequest, mig_key, shards_key
from provisioner.domain.instances import IN_FLIGHT, InstanceOrigin
from provisioner.domain.jobs import Job
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import Alternative, MoveJobs, ReasonCode, Rejection, ScaleUp
from provisioner.plan.planning_pass import (
    MAX_ALTERNATIVES,
    PlanningPass,
    parts_wanted,
    runtime_detail,
    usd,
)
from provisioner.plan.prediction import Bursting, BurstingJob
from provisioner.plan.profile import INF
from provisioner.plan.ranking import Candidate


@dataclass(slots=True)
class OpenNode:
    """A node planned in this pass (or in flight) with GPUs still unclaimed."""

    pool: str
    key: OfferKey | None
    gpu_model: str
    free: int
    spot: bool
    scale_up: int = -1  # index into the scale-up groups, -1 for capacity already in flight
    job_ids: list[str] = field(default_factory=list)
    node_name: str = ""


def _layout(p: PlanningPass, cand: Candidate) -> dict[str, str]:
    """A MIG or shard pool's node in words for the decision: its layout, and its price split
    over its devices (the cloud bills the whole node; each device's part is what a job pays)."""
    mig = _mig_of(p, cand.pool)
    shards = _shards_of(p, cand.pool)
    if mig is not None:
        layout = f"{mig.per_gpu} x {mig.profile} on each of {cand.gpus_per_node} GPUs"
    elif shards:
        layout = f"{shards} shards on each of {cand.gpus_per_node} GPUs"
    else:
        return {}
    devices = p.units_per_node(cand)
    return {
        "mig_layout" if mig is not None else "shard_layout": layout,
        "devices_per_node": str(devices),
        "usd_per_device_hour": f"{cand.usd_hr_per_node / devices:.6f}",
    }


def _pool_of(p: PlanningPass, pool: str) -> PoolPolicy | None:
    try:
        return p.policy.pool(pool)
    except UnknownName:  # a pool since removed from the policy
        return None


def _mig_of(p: PlanningPass, pool: str) -> MigLayout | None:
    policy = _pool_of(p, pool)
    return policy.mig if policy is not None else None


def _shards_of(p: PlanningPass, pool: str) -> int:
    """Shards per GPU of a shard pool's nodes; 0 for any other pool."""
    policy = _pool_of(p, pool)
    return (policy.shards_per_gpu or 0) if policy is not None else 0


def _free_parts(n: Node) -> list[tuple[str, int]]:
    """A burst node's free MIG devices per type, and its free shards (none when Slurm did
    not say how many are in use), by their open-node keys."""
    s = n.shares
    if s is None:
        return []
    free = [(mig_key(t), k) for t, k in s.mig_free.items() if k > 0]
    if s.shards and s.shards_used is not None and s.shards > s.shards_used:
        free.append((shards_key(n.gpu_type), s.shards - s.shards_used))
    return free


class _Slots:
    """The open nodes, with those that still have a GPU free kept apart in the same order:
    once they fill up, tens of thousands of bursting jobs would otherwise each look at every
    full one in turn."""

    def __init__(self, nodes: list[OpenNode]) -> None:
        self.nodes = nodes
        self._with_room = [o for o in nodes if o.free > 0]

    def find(
        self, gpus: int, models: tuple[str, ...], urgent: bool, spot_allowed: bool
    ) -> OpenNode | None:
        """The first open node, in order, that can take the job: of one of its `models`."""
        # A job of no GPUs fits a full node too, so it looks at them all.
        for o in self._with_room if gpus > 0 else self.nodes:
            if (
                o.free >= gpus
                and o.gpu_model in models
                and not (urgent and o.spot)
                and (not o.spot or spot_allowed)
            ):
                return o
        return None

    def take(self, slot: OpenNode, gpus: int, job_id: str) -> None:
        slot.free -= gpus
        slot.job_ids.append(job_id)
        if slot.free <= 0:
            self._with_room = [o for o in self._with_room if o.free > 0]

    def add(self, node: OpenNode) -> None:
        self.nodes.append(node)
        if node.free > 0:
            self._with_room.append(node)


@dataclass(slots=True)
class _Group:
    """One new scale-up of this pass, and the jobs it carries."""

    cand: Candidate
    nodes: int
    job_ids: list[str]
    team: str
    alternatives: tuple[Alternative, ...]
    wait_s: float
    budget_s: float
    saved_s: float
    urgent: bool
    runtime: dict[str, str]


@dataclass(slots=True)
class _AtMax:
    """Jobs whose every fitting pool is at its max size, one decision for each ranking and team."""

    alternatives: tuple[Alternative, ...]
    job_ids: list[str]
    team: str
    wait_s: float
    budget_s: float


def demand_of(job: Job, p: PlanningPass) -> tuple[int, tuple[str, ...]]:
    """What a job takes from a node, and of what: GPUs of its model, or MIG devices of its GRES
    type (a MIG pool's node offers those only; see PlanningPass.share_candidates), or of any
    class its constraint allows (MIG profiles first, then whole GPUs of the models named), or
    shards of its GPU type (any shard pool's, untyped)."""
    share = job.share
    if share is not None and not job.gpus:
        if share.kind == "mig":
            return share.count, (*(mig_key(t) for t in share.profiles), *share.models)
        return share.count, (shards_key(share.gres_type),) if share.gres_type else p.shard_keys
    return job.gpus, ((job.gpu_type or p.onprem_model).lower(),)


def capacity_in_flight(p: PlanningPass) -> list[OpenNode]:
    """Burst GPUs requested but not yet used: idle or partly used ready nodes and instances
    still booting. Pending jobs take these before anything new is bought."""
    nodes: list[OpenNode] = []
    seen: set[str] = set()
    by_instance = {n.instance_id: n for n in p.snap.nodes if n.instance_id}
    for n in p.snap.nodes:
        if n.kind is not NodeKind.BURST or n.state not in (NodeState.IDLE, NodeState.MIXED):
            continue
        spot = "spot" in n.features
        for key, free in _free_parts(n):  # a MIG or shard pool's node: for jobs asking for parts
            seen.add(n.instance_id or n.name)
            nodes.append(OpenNode(n.pool, None, key, free, spot, node_name=n.name))
        if n.gpus_free <= 0 or _shards_of(p, n.pool):  # a shard pool's GPUs: for shard jobs
            continue
        seen.add(n.instance_id or n.name)
        nodes.append(
            OpenNode(n.pool, None, n.gpu_type.lower(), n.gpus_free, spot, node_name=n.name)
        )
    for inst in p.snap.instances:
        if inst.state not in IN_FLIGHT or inst.instance_id in seen:
            continue
        if inst.origin is InstanceOrigin.ORPHAN:
            continue  # found by its tags: it never boots as a node for these jobs
        node = by_instance.get(inst.instance_id)
        if node is not None and node.state.usable:
            continue
        # Slurm may already have placed jobs on a node that is still powering up.
        free = inst.gpus if node is None else max(0, inst.gpus - node.gpus_alloc)
        if free <= 0:
            continue
        spot = inst.offer.capacity is CapacityType.SPOT
        mig = _mig_of(p, inst.pool)
        if mig is not None:  # still booting: every device free (Slurm places nothing yet)
            if node is None or not node.gpus_alloc:
                nodes.append(OpenNode(inst.pool, inst.offer, mig_key(mig.profile),
                                      inst.gpus * mig.per_gpu, spot))  # fmt: skip
            continue
        per_gpu = _shards_of(p, inst.pool)
        if per_gpu:  # likewise, every shard free
            if node is None or not node.gpus_alloc:
                nodes.append(OpenNode(inst.pool, inst.offer, shards_key(inst.gpu_model),
                                      inst.gpus * per_gpu, spot))  # fmt: skip
            continue
        nodes.append(OpenNode(inst.pool, inst.offer, inst.gpu_model.lower(), free, spot))
    return nodes


def burst(p: PlanningPass, bursting: Bursting, open_nodes: list[OpenNode]) -> None:
    """Place every bursting job, then make the pass's burst decisions and scale-ups."""
    _BurstPass(p, open_nodes).run(bursting)


class _BurstPass:
    """The bursting phase's running state: open slots, new groups, jobs parked at max size."""

    def __init__(self, p: PlanningPass, open_nodes: list[OpenNode]) -> None:
        self.p = p
        self.groups: list[_Group] = []
        self.at_max: dict[tuple[int, str], _AtMax] = {}
        self.planned_nodes = 0
        self.slots = _Slots(open_nodes)
        self.teams: dict[str, str] = {}  # account -> team, looked up once per pass
        # parts still to place per request (count 1) of the jobs bursting for parts of GPUs
        self.share_left: dict[ShareRequest, int] = {}

    def run(self, bursting: Bursting) -> None:
        self.share_left = parts_wanted(j for j in bursting.jobs if not j.gpus)
        for b in bursting:
            self._place(b)
        self.p.planned_nodes = self.planned_nodes
        self._decide_at_max()
        self._decide_groups()

    def _team(self, account: str) -> str:
        team = self.teams.get(account)
        if team is None:
            team = self.teams[account] = self.p.policy.budgets.team_for(account)
        return team

    def _place(self, b: BurstingJob) -> None:
        p, job = self.p, b.job
        units, models = demand_of(job, p)
        fill = self._share_fill(job)
        team = self._team(job.account)
        wait_s = b.start - p.now
        about = {"predicted_wait_s": wait_s, "wait_budget_s": b.budget, "team": team}
        if p.snap.paused:
            p.decide(ReasonCode.BLOCKED_PAUSED, (job.job_id,), **about)
            return
        # 1. capacity already bought (single-node jobs only: a gang needs fresh nodes).
        slot = self.slots.find(units, models, b.wait.urgent, b.wait.spot_allowed)
        if slot is not None:
            self.slots.take(slot, units, job.job_id)
            if slot.scale_up >= 0:
                self.groups[slot.scale_up].job_ids.append(job.job_id)
            else:
                d = p.decide(
                    ReasonCode.COVERED_BY_INFLIGHT,
                    (job.job_id,),
                    chosen=slot.key,
                    pool=slot.pool,
                    node=slot.node_name,
                    **about,
                )
                p.actions.append(MoveJobs(slot.pool, (job.job_id,), d))
            return
        # 2. a new node: the cheapest offer that passes every guardrail.
        if not b.ranked:
            detail = {"gpu_model": "|".join(models), "gpus": str(job.gpus)}
            p.decide(ReasonCode.BLOCKED_NO_OFFER, (job.job_id,), detail=detail, **about)
            return
        if p.full_pools(b.ranked) is not None:
            self._park_at_max(b, team, wait_s)
            return
        self._new_node(b, models[0], units, team, wait_s, fill)

    def _share_fill(self, job: Job) -> int:
        """The parts still to place of the jobs bursting with the same request as `job`, its
        own included (0 for a whole-GPU job); taken off as each is placed, so the last few of a
        queue are priced at what they fill, not at what the whole queue would."""
        share = job.share
        if share is None or job.gpus:
            return 0
        left = self.share_left.get(share.unit, share.count)
        self.share_left[share.unit] = left - share.count
        return max(left, share.count)

    def _park_at_max(self, b: BurstingJob, team: str, wait_s: float) -> None:
        """Every pool that could take this job is at its max size: one decision for all such
        jobs, instead of pricing hundreds of offers for each waiting job."""
        key = (id(b.ranked), team)
        parked = self.at_max.get(key)
        if parked is not None:
            parked.job_ids.append(b.job.job_id)
            return
        spot = self.p.policy.spot
        alts = tuple(
            Alternative(
                c.key, c.usd_hr, usd(c.expected_cost(b.runtime, spot)), False, Rejection.POOL_MAX
            )
            for c in b.ranked[:MAX_ALTERNATIVES]
        )
        self.at_max[key] = _AtMax(alts, [b.job.job_id], team, wait_s, b.budget)

    def _new_node(
        self, b: BurstingJob, model: str, units: int, team: str, wait_s: float, fill: int
    ) -> None:
        p, job, ranked = self.p, b.job, b.ranked
        if fill and job.share is not None:  # the cheapest node for the parts left to place
            share = job.share
            ranked = sorted(ranked, key=lambda c: p.share_cost(c, b.runtime, share, fill))
        verdict = p.first_allowed(ranked, team, b.runtime, self.planned_nodes)
        alts = verdict.alternatives
        if verdict.at < 0:
            p.decide(
                verdict.blocked or ReasonCode.BLOCKED_NO_OFFER,
                (job.job_id,),
                alternatives=tuple(alts[:MAX_ALTERNATIVES]),
                predicted_wait_s=wait_s,
                wait_budget_s=b.budget,
                team=team,
                global_headroom_usd_hr=p.budget.global_headroom(),
            )
            return
        chosen = ranked[verdict.at]
        expected = alts[-1].expected_cost_usd  # the chosen one's, priced just now
        # Show the next cheapest options too, so a reviewer sees what was passed over.
        for cand in ranked[verdict.at + 1 :]:
            if len(alts) >= MAX_ALTERNATIVES:
                break
            more = usd(cand.expected_cost(b.runtime, p.policy.spot))
            alts.append(Alternative(cand.key, cand.usd_hr, more, False, Rejection.COSTLIER))
        p.budget.spend(chosen.usd_hr, team, expected)
        p.pool_nodes[chosen.pool] = p.pool_nodes.get(chosen.pool, 0) + chosen.nodes
        self.planned_nodes += chosen.nodes
        gidx = len(self.groups)
        saved = wait_s if b.start != INF else math.inf
        self.groups.append(
            _Group(
                chosen,
                chosen.nodes,
                [job.job_id],
                team,
                tuple(alts),
                wait_s,
                b.budget,
                saved,
                b.wait.urgent,
                runtime_detail(job, b.runtime),
            )
        )
        leftover = p.units_per_node(chosen) - units
        if job.share is not None:  # its node may be of any class the job allows
            model = p.unit_key(chosen)
        if chosen.nodes == 1 and leftover > 0:
            spot = chosen.key.capacity is CapacityType.SPOT
            node = OpenNode(
                chosen.pool, chosen.key, model, leftover, spot, scale_up=gidx, job_ids=[job.job_id]
            )
            self.slots.add(node)

    def _decide_at_max(self) -> None:
        for parked in self.at_max.values():
            self.p.decide(
                ReasonCode.BLOCKED_POOL_MAX,
                parked.job_ids,
                alternatives=parked.alternatives,
                predicted_wait_s=parked.wait_s,
                wait_budget_s=parked.budget_s,
                team=parked.team,
                detail={"jobs": str(len(parked.job_ids))},
            )

    def _decide_groups(self) -> None:
        p = self.p
        for g in self.groups:
            reason = ReasonCode.BURST_URGENT if g.urgent else ReasonCode.BURST_WAIT_EXCEEDS_BUDGET
            d = p.decide(
                reason,
                tuple(g.job_ids),
                chosen=g.cand.key,
                alternatives=g.alternatives,
                predicted_wait_s=g.wait_s,
                wait_budget_s=g.budget_s,
                wait_saved_s=g.saved_s,
                global_headroom_usd_hr=p.budget.global_headroom(),
                team_headroom_usd=p.budget.team_headroom.get(g.team),
                team=g.team,
                pool=g.cand.pool,
                detail={"boot_s": f"{g.cand.boot_s:.0f}", **g.runtime, **_layout(p, g.cand)},
            )
            p.actions.append(
                ScaleUp(
                    pool=g.cand.pool,
                    offer=g.cand.key,
                    nodes=g.nodes,
                    gpus_per_node=g.cand.gpus_per_node,
                    usd_per_hour_per_node=g.cand.usd_hr_per_node,
                    job_ids=tuple(g.job_ids),
                    decision=d,
                    fallbacks=p.fallbacks(d, g.cand, g.nodes),
                )
            )
