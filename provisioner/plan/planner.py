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
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from operator import attrgetter

from provisioner.config.models import Policy, PoolPolicy, WaitPolicy
from provisioner.domain.instances import IN_FLIGHT, InstanceOrigin, InstanceState, join_timed_out
from provisioner.domain.jobs import Job
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import (
    LOWER_BOUND,
    Action,
    Alternative,
    Decision,
    Drain,
    Plan,
    ReasonCode,
    Rejection,
    ScaleUp,
    Terminate,
    decision_id,
)
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.plan.catalog import Catalog
from provisioner.plan.fallbacks import fallback_offers
from provisioner.plan.profile import INF, OnPremProfile, Placement
from provisioner.plan.rank_cache import RankCache
from provisioner.plan.ranking import Candidate, candidates_for, rank

MAX_ALTERNATIVES = 5
_BUDGET_REJECTION = {
    ReasonCode.BLOCKED_GLOBAL_BUDGET: Rejection.GLOBAL_BUDGET,
    ReasonCode.BLOCKED_TEAM_BUDGET: Rejection.TEAM_BUDGET,
}
_IN_FLIGHT = IN_FLIGHT


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
        if len(job.nodes) == 1:  # most jobs: skip building a list to find their node
            idx = index.get(job.nodes[0])
            on = [] if idx is None else [idx]
        else:
            on = [index[name] for name in job.nodes if name in index]
        if not on:
            continue
        start = job.start_ts if job.start_ts is not None else now
        # A job past its estimate is expected to end soon, not to have ended already.
        end = max(start + _runtime(job, policy), now + 60.0)
        per_node = max(1, math.ceil(job.gpus / len(on)))
        for idx in on:
            if caps[idx]:
                holds.setdefault(idx, []).append((end, min(per_node, caps[idx])))
    for idx, held in holds.items():
        prof.hold_from_start(idx, held)
    return prof


def _usd(value: float) -> Decimal:
    return Decimal(repr(round(value, 6)))


def hedge_fraction(job: Job, wp: WaitPolicy) -> float:
    """The share of its budget a job waits before it may burst (the no-regret rule, see
    WaitPolicy): 0 decides at arrival, 1 waits the whole budget."""
    if job.expected_runtime_s is None:
        # No estimate: the start is predicted from assumed runtimes. A time limit alone is
        # trusted as before (an upper bound the user chose).
        return 0.0 if job.time_limit_s is not None else wp.hedge_unknown
    if not job.runtime_source:
        return 0.0  # given as is (a user's estimate, or exact in a simulator run)
    spread = job.runtime_spread_s
    if spread is None or job.expected_runtime_s <= 0:
        return wp.hedge_unknown
    return min(wp.hedge_unknown, spread / job.expected_runtime_s / wp.hedge_cv)


def runtime_detail(job: Job, runtime: float) -> dict[str, str]:
    """What a decision shows about the runtime it planned with, and where that came from."""
    if job.expected_runtime_s is not None:
        source = job.runtime_source or "estimate"
    elif job.time_limit_s is not None:
        source = "limit"
    else:
        source = "default"
    return {"runtime_s": f"{runtime:.0f}", "runtime_source": source}


def _runtime(job: Job, policy: Policy, wp: WaitPolicy | None = None) -> float:
    """The runtime planned with: the job's estimate, else its class's assumed runtime."""
    est = job.runtime_estimate_s
    if est is not None:
        return est
    if wp is None:
        wp = policy.waiting.for_job(job.partition, job.qos)
    return wp.default_runtime_s or policy.onprem.fallback_runtime_s


def _queue_order(jobs: Sequence[Job]) -> list[Job]:
    """Jobs in queue order, by (submit time, job id). Two stable sorts on one attribute each
    give that order without building a key tuple for each of 100,000 jobs."""
    out = sorted(jobs, key=attrgetter("job_id"))
    out.sort(key=attrgetter("submit_ts"))
    return out


@dataclass
class _Bursting:
    """The jobs that will not stay on-prem, in queue order, with what the predict phase found
    for each: its wait policy, the runtime planned with, its predicted on-prem start, its
    waiting budget and its offers ranked (ranked once, there).

    Kept as columns, not as a tuple per job: a pass may hold 100,000 of them, and containers
    that live through the pass make the garbage collector walk the whole heap more often."""

    jobs: list[Job] = field(default_factory=list)
    waits: list[WaitPolicy] = field(default_factory=list)
    runtimes: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    budgets: list[float] = field(default_factory=list)
    rankings: list[list[Candidate]] = field(default_factory=list)

    def add(
        self,
        job: Job,
        wp: WaitPolicy,
        runtime: float,
        start: float,
        budget: float,
        ranked: list[Candidate],
    ) -> None:
        self.jobs.append(job)
        self.waits.append(wp)
        self.runtimes.append(runtime)
        self.starts.append(start)
        self.budgets.append(budget)
        self.rankings.append(ranked)

    def __iter__(
        self,
    ) -> Iterator[tuple[Job, WaitPolicy, float, float, float, list[Candidate]]]:
        return zip(
            self.jobs,
            self.waits,
            self.runtimes,
            self.starts,
            self.budgets,
            self.rankings,
            strict=True,
        )


@dataclass(frozen=True, slots=True)
class _JobClass:
    """What the predict phase needs of a job's (partition, qos): worked out once per pass,
    not once per pending job."""

    wait: WaitPolicy
    spot_ok: bool
    runs_onprem: bool
    default_runtime_s: float  # planned with when a job has no estimate and no time limit


@dataclass
class _Budget:
    """Running totals of what this plan commits, against the hard caps."""

    global_cap: Decimal | None
    burn: Decimal
    team_headroom: dict[str, Decimal]

    def global_headroom(self) -> Decimal | None:
        return None if self.global_cap is None else self.global_cap - self.burn

    def allows(self, usd_hr: Decimal, team: str, expected: Decimal) -> ReasonCode | None:
        if self.global_cap is not None and self.burn + usd_hr > self.global_cap:
            return ReasonCode.BLOCKED_GLOBAL_BUDGET
        room = self.team_headroom.get(team)
        if room is not None and expected > room:
            return ReasonCode.BLOCKED_TEAM_BUDGET
        return None

    def spend(self, usd_hr: Decimal, team: str, expected: Decimal) -> None:
        self.burn += usd_hr
        if team in self.team_headroom:
            self.team_headroom[team] -= expected


@dataclass
class _OpenNode:
    """A node planned in this pass (or in flight) with GPUs still unclaimed."""

    pool: str
    key: OfferKey | None
    gpu_model: str
    free: int
    spot: bool
    scale_up: int = -1  # index into the scale-up groups, -1 for capacity already in flight
    job_ids: list[str] = field(default_factory=list)
    node_name: str = ""


class _Slots:
    """The open nodes, with those that still have a GPU free kept apart in the same order:
    once they fill up, tens of thousands of bursting jobs would otherwise each look at every
    full one in turn."""

    def __init__(self, nodes: list[_OpenNode]) -> None:
        self.nodes = nodes
        self._with_room = [o for o in nodes if o.free > 0]

    def find(self, gpus: int, model: str, urgent: bool, spot_allowed: bool) -> _OpenNode | None:
        """The first open node, in order, that can take the job."""
        # A job of no GPUs fits a full node too, so it looks at them all.
        for o in self._with_room if gpus > 0 else self.nodes:
            if (
                o.free >= gpus
                and o.gpu_model == model
                and not (urgent and o.spot)
                and (not o.spot or spot_allowed)
            ):
                return o
        return None

    def take(self, slot: _OpenNode, gpus: int, job_id: str) -> None:
        slot.free -= gpus
        slot.job_ids.append(job_id)
        if slot.free <= 0:
            self._with_room = [o for o in self._with_room if o.free > 0]

    def add(self, node: _OpenNode) -> None:
        self.nodes.append(node)
        if node.free > 0:
            self._with_room.append(node)


@dataclass
class _Group:
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


class _Planner:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        policy: Policy,
        catalog: Catalog,
        backoff: Backoff,
        now: float,
        ranks: RankCache | None = None,
    ) -> None:
        self.snap = snapshot
        self.policy = policy
        self.catalog = catalog
        self.backoff = backoff
        self.now = now
        self.decisions: list[Decision] = []
        self.actions: list[Action] = []
        self.predicted: dict[str, float] = {}
        self.planned_nodes = 0
        # Jobs whose on-prem start is known only to lie beyond the search horizon (their
        # budget): their predicted wait is a lower bound, and decisions say so.
        self._beyond: set[str] = set()
        # Rankings depend only on the catalog, the policy and the job's shape: memoised in the
        # caller's RankCache so a simulator calling plan() per event does not rank again.
        cache = ranks if ranks is not None else RankCache(catalog, policy)
        self._ranks = cache.for_inputs(catalog, policy)
        # The offers that fit a job's shape, whatever its runtime: rankings of one shape differ
        # only by runtime bucket, so each shape's candidates are found once per pass.
        self._cands: dict[tuple[int, str, str, bool], list[Candidate]] = {}
        # This pass's own view of the rankings it used: one dict look-up per job.
        self._pass_ranks: dict[tuple[int, str, str, bool, int], list[Candidate]] = {}
        self._pools_of: dict[int, frozenset[str]] = {}
        self._full: dict[int, frozenset[str]] = {}
        self._pools_by_partition: dict[str, tuple[PoolPolicy, ...]] = {}
        self._onprem_partition: dict[str, bool] = {}
        self._pool_max: dict[str, int] = {}
        self.onprem_model = policy.onprem.gpu_model.lower()
        self.onprem_models = {self.onprem_model} | {
            m.lower() for m in policy.onprem.equivalent_gpu_models
        }
        self.onprem_parts = set(policy.onprem.partitions)
        self.pool_nodes: dict[str, int] = {}
        for inst in snapshot.instances:
            if not inst.state.terminal and inst.state is not InstanceState.TERMINATING:
                self.pool_nodes[inst.pool] = self.pool_nodes.get(inst.pool, 0) + 1
        budgets = policy.budgets
        headroom: dict[str, Decimal] = {}
        for team, tb in budgets.teams.items():
            spent = snapshot.spend.team_month_spent_usd.get(team, Decimal(0))
            committed = snapshot.spend.team_committed_usd.get(team, Decimal(0))
            headroom[team] = tb.monthly_usd - spent - committed
        self.budget = _Budget(budgets.global_usd_per_hour, snapshot.spend.burn_usd_hr, headroom)

    # ---- helpers -------------------------------------------------------------------------

    def _decide(self, reason: ReasonCode, job_ids: Sequence[str], **kw: object) -> Decision:
        detail = kw.get("detail") or {}
        assert isinstance(detail, dict)
        if kw.get("predicted_wait_s") is not None and any(j in self._beyond for j in job_ids):
            detail = kw["detail"] = {**detail, LOWER_BOUND: "true"}
        # Decisions without jobs (drain, terminate, keep) are told apart by what they are about.
        about: list[str] = []
        if not job_ids:
            where = {k: str(kw[k]) for k in ("pool", "node", "instance") if kw.get(k)}
            about = [f"{k}={v}" for k, v in sorted({**where, **detail}.items())]
        d = Decision(
            decision_id=decision_id(
                self.now, reason, *job_ids, *about, str(kw.get("chosen") or "")
            ),
            reason=reason,
            job_ids=tuple(job_ids),
            **kw,  # type: ignore[arg-type]
        )
        self.decisions.append(d)
        return d

    def _pools_for(self, job: Job) -> tuple[PoolPolicy, ...]:
        hit = self._pools_by_partition.get(job.partition)
        if hit is None:
            parts = set(job.partitions)
            can_move = bool(parts & self.onprem_parts)
            hit = tuple(p for p in self.policy.pools if p.partition in parts or can_move)
            self._pools_by_partition[job.partition] = hit
        return hit

    def _runs_onprem(self, job: Job) -> bool:
        hit = self._onprem_partition.get(job.partition)
        if hit is None:
            hit = bool(set(job.partitions) & self.onprem_parts)
            self._onprem_partition[job.partition] = hit
        return hit

    def _job_class(self, job: Job) -> _JobClass:
        wp = self.policy.waiting.for_job(job.partition, job.qos)
        return _JobClass(
            wait=wp,
            spot_ok=not (wp.urgent or not wp.spot_allowed),
            runs_onprem=self._runs_onprem(job),
            default_runtime_s=wp.default_runtime_s or self.policy.onprem.fallback_runtime_s,
        )

    def _ranked(self, job: Job, model: str, spot_ok: bool, runtime: float) -> list[Candidate]:
        key = (job.gpus, model, job.partition, spot_ok, int(math.log2(runtime + 1.0)))
        hit = self._pass_ranks.get(key)
        if hit is None:
            hit = self._ranks.get(key)
            if hit is None:
                hit = rank(self._candidates(job, model, spot_ok), runtime, self.policy.spot)
                self._ranks.put(key, hit)
            self._pass_ranks[key] = hit
        return hit

    def _candidates(self, job: Job, model: str, spot_ok: bool) -> list[Candidate]:
        shape = (job.gpus, model, job.partition, spot_ok)
        hit = self._cands.get(shape)
        if hit is None:
            caps: tuple[CapacityType, ...] = (
                (CapacityType.ON_DEMAND, CapacityType.SPOT)
                if spot_ok
                else (CapacityType.ON_DEMAND,)
            )
            hit = self._cands[shape] = candidates_for(
                job.gpus,
                model,
                self._pools_for(job),
                self.catalog,
                caps,
                self.policy.spot,
                self.policy.onprem.equivalent_gpu_models,
            )
        return hit

    def _full_pools(self, ranked: Sequence[Candidate]) -> frozenset[str] | None:
        """The pools of `ranked` when every one of them is at its max size, else None."""
        full = self._full.get(id(ranked))
        if full is not None:
            return full  # pools only fill up during a pass: full once, full for the rest
        pools = self._pools_of.get(id(ranked))
        if pools is None:
            pools = frozenset(c.pool for c in ranked)
            self._pools_of[id(ranked)] = pools
        for name in pools:
            if self.pool_nodes.get(name, 0) < self._max_nodes(name):
                return None
        self._full[id(ranked)] = pools
        return pools

    def _max_nodes(self, pool: str) -> int:
        """The pool's max size, by name (Policy.pool scans the list: a dict look-up here)."""
        hit = self._pool_max.get(pool)
        if hit is None:
            hit = self._pool_max[pool] = self.policy.pool(pool).max_nodes
        return hit

    # ---- phases --------------------------------------------------------------------------

    def run(self, profile: OnPremProfile | None) -> Plan:
        if self.snap.stale:
            self._decide(
                ReasonCode.BLOCKED_STALE_SNAPSHOT,
                (),
                detail={"reasons": "; ".join(self.snap.stale_reasons) or "stale snapshot"},
            )
            return Plan(self.now, (), tuple(self.decisions), {})
        prof = (
            profile.copy()
            if profile is not None
            else build_profile(self.snap, self.policy, self.now)
        )
        bursting = self._predict(prof)
        open_nodes = self._capacity_in_flight()
        self._burst(bursting, open_nodes)
        self._slurm_power_ups()
        claimed = {o.node_name for o in open_nodes if o.node_name and o.job_ids}
        self._scale_down(claimed)
        return Plan(self.now, tuple(self.actions), tuple(self.decisions), self.predicted)

    def _predict(self, prof: OnPremProfile) -> _Bursting:
        """Place pending jobs on-prem in queue order; return those that should burst."""
        out = _Bursting()
        now = self.now
        spot = self.policy.spot
        onprem_total = prof.total_gpus
        onprem_models = self.onprem_models
        classes: dict[tuple[str, str], _JobClass] = {}
        for job in _queue_order(self.snap.pending):
            if not job.can_start(now):
                if not (job.launch_failed and self._release(job)):
                    self._not_eligible(job)
                continue
            jc = classes.get((job.partition, job.qos))
            if jc is None:
                jc = classes[(job.partition, job.qos)] = self._job_class(job)
            wp = jc.wait
            # Job.runtime_estimate_s and _runtime(), inlined: this loop runs for every job.
            est = job.expected_runtime_s
            if est is None:
                est = job.time_limit_s
            runtime = jc.default_runtime_s if est is None else est
            model = job.gpu_type.lower() if job.gpu_type else self.onprem_model
            placement: Placement | None = None
            onprem_ok = jc.runs_onprem and model in onprem_models
            if onprem_ok:
                placement = prof.earliest(job.gpus, now, runtime, now)
            urgent = wp.urgent
            waited_for_boot = hedged = False
            ranked: list[Candidate] = []
            if placement is not None:  # starts at once
                start, budget, stay = now, 0.0, True
            else:
                ranked = self._ranked(job, model, jc.spot_ok, runtime)
                cheapest = ranked[0].expected_cost(runtime, spot) if ranked else None
                budget = wp.budget_s(job.gpus, est, cheapest)
                boot = ranked[0].boot_s if ranked else INF
                # Only a start by the budget (or before a cloud node could boot) matters.
                latest = now if urgent else max(job.submit_ts + budget, now + boot)
                if onprem_ok:
                    placement = prof.earliest(
                        job.gpus, now, runtime, latest=latest, known_not_now=True
                    )
                # When the search stopped at `latest`, the start is only known to lie beyond it.
                start = placement.start_ts if placement is not None else INF
                if placement is None and onprem_ok and latest < INF:
                    start = latest + 1.0
                    self._beyond.add(job.job_id)
                stay = start <= now if urgent else start - job.submit_ts <= budget
                if not stay and not urgent and placement is not None and start - now <= boot:
                    waited_for_boot = True
                    self._decide(
                        ReasonCode.WAIT_FASTER_THAN_BOOT,
                        (job.job_id,),
                        predicted_wait_s=start - now,
                        wait_budget_s=budget,
                        detail={"boot_s": f"{boot:.0f}", **runtime_detail(job, runtime)},
                    )
                    stay = True
                if not stay and not urgent and onprem_ok:
                    # No regret: a start predicted from a guessed runtime does not send the job
                    # to the cloud before it has waited its share of the budget (unless it could
                    # never run on-prem at all).
                    share = hedge_fraction(job, wp)
                    if (
                        share > 0
                        and now - job.submit_ts < share * budget
                        and job.gpus <= onprem_total
                    ):
                        hedged = stay = True
                        self._decide(
                            ReasonCode.WAIT_UNCERTAIN_RUNTIME,
                            (job.job_id,),
                            predicted_wait_s=start - now,
                            wait_budget_s=budget,
                            detail={
                                "burst_after_s": f"{share * budget:.0f}",
                                **runtime_detail(job, runtime),
                            },
                        )
            if stay:
                if placement is not None:
                    prof.commit(placement, start + runtime)
                    self.predicted[job.job_id] = start
                if not (urgent or waited_for_boot or hedged or start - now <= 0):
                    self._decide(
                        ReasonCode.WAIT_WITHIN_BUDGET,
                        (job.job_id,),
                        predicted_wait_s=start - now,
                        wait_budget_s=budget,
                        detail=runtime_detail(job, runtime),
                    )
                continue
            out.add(job, wp, runtime, start, budget, ranked)
        return out

    def _release(self, job: Job) -> bool:
        """A job Slurm held after a failed launch can only launch on a cloud node (see
        `Job.launch_failed`): it goes back to the queue in the burst partition of its cheapest
        fitting pool. Nothing is bought here: Slurm powers a node up for it, and that power-up
        is planned with every guardrail. False when no pool can hold it."""
        jc = self._job_class(job)
        model = job.gpu_type.lower() if job.gpu_type else self.onprem_model
        ranked = self._ranked(job, model, jc.spot_ok, _runtime(job, self.policy, jc.wait))
        if not ranked:
            return False
        self._decide(
            ReasonCode.RELEASE_LAUNCH_FAILED,
            (job.job_id,),
            pool=ranked[0].pool,
            detail={"why": "held by Slurm after a failed launch: back in a burst partition"},
        )
        return True

    def _not_eligible(self, job: Job) -> None:
        """Held, or not to start before its begin time: no capacity now, on-prem or cloud, can
        run it, so none is bought (after a failed boot Slurm delays the requeued jobs)."""
        if job.held or job.eligible_ts is None:
            why = "held by Slurm until released"
        else:  # the time itself, not a countdown: the verdict stays the same from pass to pass
            begin = datetime.fromtimestamp(job.eligible_ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            why = f"Slurm will not start it before {begin} (begin time)"
        self._decide(ReasonCode.WAIT_NOT_ELIGIBLE, (job.job_id,), detail={"why": why})

    def _capacity_in_flight(self) -> list[_OpenNode]:
        """Burst GPUs requested but not yet used: idle or partly used ready nodes and instances
        still booting. Pending jobs take these before anything new is bought."""
        nodes: list[_OpenNode] = []
        seen: set[str] = set()
        by_instance = {n.instance_id: n for n in self.snap.nodes if n.instance_id}
        for n in self.snap.nodes:
            if n.kind is not NodeKind.BURST or n.state not in (NodeState.IDLE, NodeState.MIXED):
                continue
            if n.gpus_free <= 0:
                continue
            seen.add(n.instance_id or n.name)
            nodes.append(
                _OpenNode(
                    n.pool,
                    None,
                    n.gpu_type.lower(),
                    n.gpus_free,
                    "spot" in n.features,
                    node_name=n.name,
                )
            )
        for inst in self.snap.instances:
            if inst.state not in _IN_FLIGHT or inst.instance_id in seen:
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
            nodes.append(
                _OpenNode(
                    inst.pool,
                    inst.offer,
                    inst.gpu_model.lower(),
                    free,
                    inst.offer.capacity is CapacityType.SPOT,
                )
            )
        return nodes

    def _burst(
        self,
        bursting: _Bursting,
        open_nodes: list[_OpenNode],
    ) -> None:
        groups: list[_Group] = []
        at_max: dict[
            tuple[int, str], tuple[tuple[Alternative, ...], list[str], str, float, float]
        ] = {}
        planned_nodes = 0
        slots = _Slots(open_nodes)
        teams: dict[str, str] = {}  # account -> team, looked up once per pass
        now, paused, onprem_model = self.now, self.snap.paused, self.onprem_model
        spot = self.policy.spot
        for job, wp, runtime, start, budget, ranked in bursting:
            model = (job.gpu_type or onprem_model).lower()
            urgent = wp.urgent
            team = teams.get(job.account)
            if team is None:
                team = teams[job.account] = self.policy.budgets.team_for(job.account)
            wait_s = start - now
            saved = wait_s if start != INF else math.inf
            if paused:
                self._decide(
                    ReasonCode.BLOCKED_PAUSED,
                    (job.job_id,),
                    predicted_wait_s=wait_s,
                    wait_budget_s=budget,
                    team=team,
                )
                continue
            # 1. capacity already bought (single-node jobs only: a gang needs fresh nodes).
            slot = slots.find(job.gpus, model, urgent, wp.spot_allowed)
            if slot is not None:
                slots.take(slot, job.gpus, job.job_id)
                if slot.scale_up >= 0:
                    groups[slot.scale_up].job_ids.append(job.job_id)
                else:
                    self._decide(
                        ReasonCode.COVERED_BY_INFLIGHT,
                        (job.job_id,),
                        chosen=slot.key,
                        pool=slot.pool,
                        node=slot.node_name,
                        predicted_wait_s=wait_s,
                        wait_budget_s=budget,
                        team=team,
                    )
                continue
            # 2. a new node: the cheapest offer that passes every guardrail.
            if not ranked:
                self._decide(
                    ReasonCode.BLOCKED_NO_OFFER,
                    (job.job_id,),
                    predicted_wait_s=wait_s,
                    wait_budget_s=budget,
                    team=team,
                    detail={"gpu_model": model, "gpus": str(job.gpus)},
                )
                continue
            if self._full_pools(ranked) is not None:
                # Every pool that could take this job is at its max size: one decision for all
                # such jobs, instead of pricing hundreds of offers for each waiting job.
                key = (id(ranked), team)
                group = at_max.get(key)
                if group is None:
                    alts: list[Alternative] = [
                        Alternative(
                            c.key,
                            c.usd_hr,
                            _usd(c.expected_cost(runtime, spot)),
                            False,
                            Rejection.POOL_MAX,
                        )
                        for c in ranked[:MAX_ALTERNATIVES]
                    ]
                    at_max[key] = (tuple(alts), [job.job_id], team, wait_s, budget)
                else:
                    group[1].append(job.job_id)
                continue
            at, alts, blocked = self._first_allowed(ranked, team, runtime, planned_nodes)
            if at < 0:
                self._decide(
                    blocked or ReasonCode.BLOCKED_NO_OFFER,
                    (job.job_id,),
                    alternatives=tuple(alts[:MAX_ALTERNATIVES]),
                    predicted_wait_s=wait_s,
                    wait_budget_s=budget,
                    team=team,
                    global_headroom_usd_hr=self.budget.global_headroom(),
                )
                continue
            chosen = ranked[at]
            expected = alts[-1].expected_cost_usd  # the chosen one's, priced just now
            # Show the next cheapest options too, so a reviewer sees what was passed over.
            for cand in ranked[at + 1 :]:
                if len(alts) >= MAX_ALTERNATIVES:
                    break
                more = _usd(cand.expected_cost(runtime, spot))
                alts.append(Alternative(cand.key, cand.usd_hr, more, False, Rejection.COSTLIER))
            self.budget.spend(chosen.usd_hr, team, expected)
            self.pool_nodes[chosen.pool] = self.pool_nodes.get(chosen.pool, 0) + chosen.nodes
            planned_nodes += chosen.nodes
            gidx = len(groups)
            groups.append(
                _Group(
                    chosen,
                    chosen.nodes,
                    [job.job_id],
                    team,
                    tuple(alts),
                    wait_s,
                    budget,
                    saved,
                    urgent,
                    runtime_detail(job, runtime),
                )
            )
            leftover = chosen.gpus_per_node - job.gpus
            if chosen.nodes == 1 and leftover > 0:
                slots.add(
                    _OpenNode(
                        chosen.pool,
                        chosen.key,
                        model,
                        leftover,
                        chosen.key.capacity is CapacityType.SPOT,
                        scale_up=gidx,
                        job_ids=[job.job_id],
                    )
                )
        self.planned_nodes = planned_nodes
        for alts_t, job_ids, team, wait_s, budget in at_max.values():
            self._decide(
                ReasonCode.BLOCKED_POOL_MAX,
                job_ids,
                alternatives=alts_t,
                predicted_wait_s=wait_s,
                wait_budget_s=budget,
                team=team,
                detail={"jobs": str(len(job_ids))},
            )
        for g in groups:
            reason = ReasonCode.BURST_URGENT if g.urgent else ReasonCode.BURST_WAIT_EXCEEDS_BUDGET
            team_room = self.budget.team_headroom.get(g.team)
            d = self._decide(
                reason,
                tuple(g.job_ids),
                chosen=g.cand.key,
                alternatives=g.alternatives,
                predicted_wait_s=g.wait_s,
                wait_budget_s=g.budget_s,
                wait_saved_s=g.saved_s,
                global_headroom_usd_hr=self.budget.global_headroom(),
                team_headroom_usd=team_room,
                team=g.team,
                pool=g.cand.pool,
                detail={"boot_s": f"{g.cand.boot_s:.0f}", **g.runtime},
            )
            self.actions.append(
                ScaleUp(
                    pool=g.cand.pool,
                    offer=g.cand.key,
                    nodes=g.nodes,
                    gpus_per_node=g.cand.gpus_per_node,
                    usd_per_hour_per_node=g.cand.usd_hr_per_node,
                    job_ids=tuple(g.job_ids),
                    decision=d,
                    fallbacks=self._fallbacks(d, g.cand, g.nodes),
                )
            )

    def _fallbacks(self, d: Decision, chosen: Candidate, nodes: int) -> tuple[OfferKey, ...]:
        """What the actuator may try after `chosen`, in order; backed-off offers are left out
        (the actuator skips them too, should one be backed off by the time it acts)."""
        keys = fallback_offers(
            d,
            self.policy.pool(chosen.pool),
            chosen.key,
            chosen.gpus_per_node,
            nodes,
            self.catalog,
            self.policy.onprem.equivalent_gpu_models,
        )
        return tuple(k for k in keys if not self.backoff.blocked(k, self.now))

    def _first_allowed(
        self, ranked: Sequence[Candidate], team: str, runtime: float, planned_nodes: int
    ) -> tuple[int, list[Alternative], ReasonCode | None]:
        """The index in `ranked` of the cheapest that passes every guardrail (back-off, the
        pool's max size, the per-pass max, the global $/h cap and the team's monthly budget;
        -1 if none does), the alternatives passed over with why, and the first guardrail that
        blocked one. Every scale-up, the planner's own and the ones Slurm asks for, goes
        through here."""
        alts: list[Alternative] = []
        blocked: ReasonCode | None = None
        spot = self.policy.spot
        cap_nodes = self.policy.guardrails.max_scale_up_nodes_per_pass
        for at, cand in enumerate(ranked):
            why: Rejection | None = None
            expected: Decimal | None = None
            if self.backoff.blocked(cand.key, self.now):
                why, code = Rejection.BACKOFF, ReasonCode.BLOCKED_BACKOFF
            elif self.pool_nodes.get(cand.pool, 0) + cand.nodes > self._max_nodes(cand.pool):
                why, code = Rejection.POOL_MAX, ReasonCode.BLOCKED_POOL_MAX
            elif planned_nodes + cand.nodes > cap_nodes:
                why, code = Rejection.PASS_MAX, ReasonCode.BLOCKED_POOL_MAX
            else:
                expected = _usd(cand.expected_cost(runtime, spot))
                verdict = self.budget.allows(cand.usd_hr, team, expected)
                if verdict is not None:
                    why, code = _BUDGET_REJECTION[verdict], verdict
            if why:
                blocked = blocked or code
                if len(alts) < MAX_ALTERNATIVES:
                    if expected is None:
                        expected = _usd(cand.expected_cost(runtime, spot))
                    alts.append(Alternative(cand.key, cand.usd_hr, expected, False, why))
                continue
            assert expected is not None
            alts.append(Alternative(cand.key, cand.usd_hr, expected, True))
            return at, alts, blocked
        return -1, alts, blocked

    def _slurm_power_ups(self) -> None:
        """Slurm-driven mode: a job submitted straight to a burst partition makes Slurm power
        up a CLOUD node on its own. Such a node gets an instance only as any burst does: the
        cheapest offer of the node's pool that passes every guardrail, the team's budget
        included. A node that unbound capacity of its pool (booting, or a launch not listed
        yet) will take needs nothing new; a blocked one times out in Slurm, which requeues its
        job."""
        powering = sorted(
            (
                n
                for n in self.snap.nodes
                if n.kind is NodeKind.BURST and n.state is NodeState.POWERING_UP
            ),
            key=lambda n: n.name,
        )
        if not powering:
            return  # the common case: no need to map every job to its nodes
        held = {i.node_name for i in self.snap.instances if i.node_name and not i.state.terminal}
        spare: dict[str, int] = {}
        for inst in self.snap.instances:
            if (
                not inst.node_name
                and inst.state in (InstanceState.REQUESTED, InstanceState.ALLOCATED)
                and inst.origin is InstanceOrigin.PLANNED
            ):
                spare[inst.pool] = spare.get(inst.pool, 0) + 1
        wanted = {n.name for n in powering}
        jobs_on: dict[str, list[Job]] = {}
        for job in (*self.snap.running, *self.snap.pending):
            for name in job.nodes:
                if name in wanted:
                    jobs_on.setdefault(name, []).append(job)
        pools = {p.name: p for p in self.policy.pools}
        for node in powering:
            if node.name in held or node.pool not in pools:
                continue
            if spare.get(node.pool, 0) > 0:
                spare[node.pool] -= 1
                continue
            pool = pools[node.pool]
            jobs = jobs_on.get(node.name, [])
            job_ids = tuple(j.job_id for j in jobs)
            team = self.policy.budgets.team_for(jobs[0].account if jobs else "")
            about = {"by": "slurm"}
            where = {"node": node.name, "pool": pool.name}
            if self.snap.paused:
                self._decide(ReasonCode.BLOCKED_PAUSED, job_ids, team=team, detail=about, **where)
                continue
            gpus = node.gpus or 1
            model = (pool.gpu_model or node.gpu_type or self.onprem_model).lower()
            runtime = max((_runtime(j, self.policy) for j in jobs), default=0.0) or (
                self.policy.waiting.default.default_runtime_s
                or self.policy.onprem.fallback_runtime_s
            )
            cands = candidates_for(
                gpus,
                model,
                (pool,),
                self.catalog,
                (CapacityType.ON_DEMAND, CapacityType.SPOT),
                self.policy.spot,
                self.policy.onprem.equivalent_gpu_models,
            )
            ranked = [
                c
                for c in rank(cands, runtime, self.policy.spot)
                if c.nodes == 1 and c.gpus_per_node >= gpus
            ]
            at, alts, blocked = self._first_allowed(ranked, team, runtime, self.planned_nodes)
            if at < 0:
                self._decide(
                    blocked or ReasonCode.BLOCKED_NO_OFFER,
                    job_ids,
                    alternatives=tuple(alts),
                    team=team,
                    global_headroom_usd_hr=self.budget.global_headroom(),
                    team_headroom_usd=self.budget.team_headroom.get(team),
                    detail=about,
                    **where,
                )
                continue
            chosen = ranked[at]
            expected = alts[-1].expected_cost_usd  # the chosen one's, priced just now
            self.budget.spend(chosen.usd_hr, team, expected)
            self.pool_nodes[pool.name] = self.pool_nodes.get(pool.name, 0) + 1
            self.planned_nodes += 1
            d = self._decide(
                ReasonCode.BURST_URGENT,
                job_ids,
                chosen=chosen.key,
                alternatives=tuple(alts),
                global_headroom_usd_hr=self.budget.global_headroom(),
                team_headroom_usd=self.budget.team_headroom.get(team),
                team=team,
                detail=about,
                **where,
            )
            self.actions.append(
                ScaleUp(
                    pool=pool.name,
                    offer=chosen.key,
                    nodes=1,
                    gpus_per_node=chosen.gpus_per_node,
                    usd_per_hour_per_node=chosen.usd_hr_per_node,
                    job_ids=job_ids,
                    decision=d,
                    fallbacks=self._fallbacks(d, chosen, 1),
                )
            )

    def _scale_down(self, claimed: set[str]) -> None:
        guard = self.policy.guardrails
        now = self.now
        burst = (n for n in self.snap.nodes if n.kind is NodeKind.BURST)
        for node in sorted(burst, key=lambda n: n.name):
            if node.state is NodeState.DRAINED or (
                node.state is NodeState.DRAINING and node.gpus_alloc == 0
            ):
                d = self._decide(ReasonCode.TERMINATE_DRAINED, (), node=node.name)
                self.actions.append(Terminate(node.name, node.instance_id, node.pool, d))
                continue
            if node.state is not NodeState.IDLE or node.gpus_alloc > 0 or node.name in claimed:
                continue
            if node.idle_since_ts is None or now - node.idle_since_ts < guard.idle_timeout_s:
                continue
            nvml_idle = node.gpus_idle_by_nvml(guard.nvml_idle_util_pct)
            if nvml_idle is False or (nvml_idle is None and guard.require_nvml_idle):
                self._decide(
                    ReasonCode.KEEP_GPU_BUSY,
                    (),
                    node=node.name,
                    detail={
                        "why": "NVML shows GPU load" if nvml_idle is False else "no NVML sample",
                    },
                )
                continue
            d = self._decide(
                ReasonCode.SCALE_DOWN_IDLE,
                (),
                node=node.name,
                detail={"idle_s": f"{now - node.idle_since_ts:.0f}"},
            )
            self.actions.append(Drain(node.name, node.instance_id, node.pool, d))
        for inst in self.snap.instances:
            if join_timed_out(inst, now, guard.join_timeout_s):
                d = self._decide(
                    ReasonCode.JOIN_TIMEOUT,
                    (),
                    instance=inst.instance_id,
                    detail={"state": inst.state.value},
                )
                self.actions.append(Terminate(inst.node_name, inst.instance_id, inst.pool, d))


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
    return _Planner(snapshot, policy, catalog, backoff, now, ranks).run(onprem)
