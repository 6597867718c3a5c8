"""What every phase of one planning pass shares: the inputs, the running totals against the hard
caps, the decisions and actions made so far, the memoised offer rankings, and the guardrail walk
every scale-up goes through (`first_allowed`). The phases themselves (prediction, bursting, Slurm
power-ups, scale-down) live in modules of their own and take a `PlanningPass`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from provisioner.config.models import Policy, PoolPolicy, WaitPolicy
from provisioner.domain.gpu_share import ShareRequest, mig_key, mig_profile_of, shards_key
from provisioner.domain.instances import InstanceState
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.money import rounded
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.plan import (
    LOWER_BOUND,
    Action,
    Alternative,
    Decision,
    ReasonCode,
    Rejection,
    decision_id,
)
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.plan.catalog import Catalog
from provisioner.plan.fallbacks import fallback_offers
from provisioner.plan.rank_cache import RankCache
from provisioner.plan.ranking import Candidate, candidates_for, rank

MAX_ALTERNATIVES = 5
_BUDGET_REJECTION = {
    ReasonCode.BLOCKED_GLOBAL_BUDGET: Rejection.GLOBAL_BUDGET,
    ReasonCode.BLOCKED_TEAM_BUDGET: Rejection.TEAM_BUDGET,
}


def usd(value: float) -> Decimal:
    return rounded(value, 6)


def runtime_detail(job: Job, runtime: float) -> dict[str, str]:
    """What a decision shows about the runtime it planned with, and where that came from."""
    if job.expected_runtime_s is not None:
        source = job.runtime_source or "estimate"
    elif job.time_limit_s is not None:
        source = "limit"
    else:
        source = "default"
    return {"runtime_s": f"{runtime:.0f}", "runtime_source": source}


def planned_runtime(job: Job, policy: Policy, wp: WaitPolicy | None = None) -> float:
    """The runtime planned with: the job's estimate, else its class's assumed runtime."""
    est = job.runtime_estimate_s
    if est is not None:
        return est
    if wp is None:
        wp = policy.waiting.for_job(job.partition, job.qos)
    return wp.default_runtime_s or policy.onprem.fallback_runtime_s


@dataclass(frozen=True, slots=True)
class JobClass:
    """What the predict phase needs of a job's (partition, qos): worked out once per pass,
    not once per pending job."""

    wait: WaitPolicy
    spot_ok: bool
    runs_onprem: bool
    default_runtime_s: float  # planned with when a job has no estimate and no time limit


@dataclass
class Budget:
    """Running totals of what this plan commits, against the hard caps."""

    global_cap: Decimal | None
    burn: Decimal
    team_headroom: dict[str, Decimal]
    burn_unknown: str = ""  # why the burn may be short: then no $/h cap can be checked

    def global_headroom(self) -> Decimal | None:
        return None if self.global_cap is None else self.global_cap - self.burn

    def allows(self, usd_hr: Decimal, team: str, expected: Decimal) -> ReasonCode | None:
        if self.global_cap is not None and (
            self.burn_unknown or self.burn + usd_hr > self.global_cap
        ):
            return ReasonCode.BLOCKED_GLOBAL_BUDGET
        room = self.team_headroom.get(team)
        if room is not None and expected > room:
            return ReasonCode.BLOCKED_TEAM_BUDGET
        return None

    def spend(self, usd_hr: Decimal, team: str, expected: Decimal) -> None:
        self.burn += usd_hr
        if team in self.team_headroom:
            self.team_headroom[team] -= expected


@dataclass(frozen=True, slots=True)
class FirstAllowed:
    """The guardrail walk's verdict over a ranking: the index of the cheapest offer that passes
    every guardrail (-1 when none does), the offers passed over with why (the chosen one last,
    when there is one), and the first guardrail that blocked one."""

    at: int
    alternatives: list[Alternative]
    blocked: ReasonCode | None


def parts_wanted(jobs: Iterable[Job]) -> dict[ShareRequest, int]:
    """Parts of GPUs the jobs asking for them want, per request for one part."""
    wanted: dict[ShareRequest, int] = {}
    for j in jobs:
        if j.share is not None:
            wanted[j.share.unit] = wanted.get(j.share.unit, 0) + j.share.count
    return wanted


def _holds_layout(pool: PoolPolicy, cand: Candidate) -> bool:
    """A MIG pool's offer has the memory its layout cuts from each GPU (`7 x 1g.10gb` needs an
    80 GB A100, not a 40 GB one); an offer of unknown memory is taken at its word."""
    mig, mem = pool.mig, cand.offer.gpu_mem_gb
    if mig is None or mem is None:
        return True
    profile = mig_profile_of(mig.profile)
    return profile is None or mem >= profile.memory_gb * mig.per_gpu


class PlanningPass:
    """One pass's shared state; the phases read it and add decisions and actions to it."""

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
        self.beyond: set[str] = set()
        # Rankings depend only on the catalog, the policy and the job's shape: memoised in the
        # caller's RankCache so a simulator calling plan() per event does not rank again.
        cache = ranks if ranks is not None else RankCache(catalog, policy)
        self._ranks = cache.for_inputs(catalog, policy)
        # The offers that fit a job's shape, whatever its runtime: rankings of one shape differ
        # only by runtime bucket, so each shape's candidates are found once per pass.
        self._cands: dict[tuple[int, str, str, bool], list[Candidate]] = {}
        # This pass's own view of the rankings it used: one dict look-up per job.
        self._pass_ranks: dict[tuple[int, str, str, bool, int], list[Candidate]] = {}
        # share_candidates, per (GRES type, partition, spot, runtime bucket): once per pass
        self._share_ranks: dict[tuple[ShareRequest, str, bool, int], list[Candidate]] = {}
        self._pending_shares: dict[ShareRequest, int] | None = None  # units per kind of part
        self._pools_of: dict[int, frozenset[str]] = {}
        self._full: dict[int, frozenset[str]] = {}
        self._pools_by_partition: dict[str, tuple[PoolPolicy, ...]] = {}
        self._onprem_partition: dict[str, bool] = {}
        self._pool_max: dict[str, int] = {}
        self.onprem_model = self._ranks.onprem_model
        self.onprem_models = self._ranks.onprem_models
        self.onprem_parts = self._ranks.onprem_parts
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
        self.budget = Budget(
            budgets.global_usd_per_hour,
            snapshot.spend.burn_usd_hr,
            headroom,
            burn_unknown=snapshot.spend.unknown,
        )

    # ---- helpers -------------------------------------------------------------------------

    def decide(self, reason: ReasonCode, job_ids: Sequence[str], **kw: object) -> Decision:
        detail = kw.get("detail") or {}
        assert isinstance(detail, dict)
        beyond = self.beyond
        if beyond and kw.get("predicted_wait_s") is not None and any(j in beyond for j in job_ids):
            detail = kw["detail"] = {**detail, LOWER_BOUND: "true"}
        if reason is ReasonCode.BLOCKED_GLOBAL_BUDGET and self.budget.burn_unknown:
            detail = kw["detail"] = {**detail, "spend_unknown": self.budget.burn_unknown}
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

    def pools_for(self, job: Job) -> tuple[PoolPolicy, ...]:
        hit = self._pools_by_partition.get(job.partition)
        if hit is None:
            parts = set(job.partitions)
            can_move = bool(parts & self.onprem_parts)
            # MIG and shard pools take only jobs asking for their parts (share_candidates)
            hit = tuple(
                p
                for p in self.policy.pools
                if (p.partition in parts or can_move) and p.mig is None and not p.shards_per_gpu
            )
            self._pools_by_partition[job.partition] = hit
        return hit

    def units_per_node(self, cand: Candidate) -> int:
        """What a node of `cand` offers jobs: its GPUs, or its MIG devices in a MIG pool."""
        pool = self.policy.pool(cand.pool)
        per_gpu = pool.mig.per_gpu if pool.mig is not None else pool.shards_per_gpu or 1
        return cand.gpus_per_node * per_gpu

    def unit_key(self, cand: Candidate) -> str:
        """What a node of `cand` offers, as open nodes are keyed: MIG devices of its pool's
        profile, or whole GPUs of its model."""
        pool = self.policy.pool(cand.pool)
        if pool.mig is not None:
            return mig_key(pool.mig.profile)
        model = cand.offer.gpu_model
        return shards_key(model) if pool.shards_per_gpu else model.lower()

    @property
    def shard_keys(self) -> tuple[str, ...]:
        """The open-node keys of every shard pool's GPUs: where an untyped shard job fits."""
        models = (p.gpu_model or self.onprem_model for p in self.policy.pools if p.shards_per_gpu)
        return tuple(dict.fromkeys(shards_key(m) for m in models))

    def share_candidates(self, job: Job, spot_ok: bool, runtime: float) -> list[Candidate]:
        """One node each of the MIG pools whose devices the job may take (Slurm matches a
        typed request's type exactly) and, where its constraint names them, of whole GPUs of
        other models with the memory its MIG profile has: cheapest per job first, each node
        priced whole and split over the parts it would fill (`share_cost`)."""
        share = job.share
        assert share is not None
        key = (share, job.partition, spot_ok, int(math.log2(runtime + 1.0)))
        hit = self._share_ranks.get(key)
        if hit is None:
            hit = self._share_ranks[key] = self._share_candidates(job, share, spot_ok, runtime)
        return hit

    def share_cost(
        self, cand: Candidate, runtime: float, share: ShareRequest, fill: int | None = None
    ) -> float:
        """A share job's part of a node's expected bill: the node over the parts that `fill`
        (else the pending jobs of its kind) would fill, at least the job's own. The cloud bills
        the whole node, so a node few jobs fill is dear for each of them."""
        if fill is None:
            fill = self._share_demand().get(share.unit, 0)
        fill = max(share.count, fill)
        units = self.units_per_node(cand)
        return cand.expected_cost(runtime, self.policy.spot) * share.count / min(units, fill)

    def _share_demand(self) -> dict[ShareRequest, int]:
        if self._pending_shares is None:
            pending = (j for j in self.snap.jobs if j.state is JobState.PENDING)
            self._pending_shares = parts_wanted(pending)
        return self._pending_shares

    def _share_candidates(
        self, job: Job, share: ShareRequest, spot_ok: bool, runtime: float
    ) -> list[Candidate]:
        parts = set(job.partitions)
        can_move = bool(parts & self.onprem_parts)
        pools = [
            p
            for p in self.policy.pools
            if self._offers_part(p, share) and (p.partition in parts or can_move)
        ]
        caps = (CapacityType.ON_DEMAND, CapacityType.SPOT) if spot_ok else (CapacityType.ON_DEMAND,)
        found: list[Candidate] = []
        for pool in pools:
            model = pool.gpu_model or self.onprem_model
            offers = candidates_for(1, model, [pool], self.catalog, caps, self.policy.spot)
            found += [c for c in offers if _holds_layout(pool, c)]
        # whole GPUs of the models it names, each with at least its profile's memory
        need = share.profile.memory_gb if share.profile is not None else math.inf
        for model in share.models:
            whole = candidates_for(
                1, model, self.pools_for(job), self.catalog, caps, self.policy.spot
            )
            found += [c for c in whole if (c.offer.gpu_mem_gb or 0.0) >= need]
        fits = [c for c in found if c.nodes == 1 and self.units_per_node(c) >= share.count]
        ranked = rank(fits, runtime, self.policy.spot)
        ranked.sort(key=lambda c: self.share_cost(c, runtime, share.unit))
        return ranked

    def _offers_part(self, pool: PoolPolicy, share: ShareRequest) -> bool:
        """A MIG pool of a profile the job names, or a shard pool of the GPU type its shard
        request names (any, for an untyped one)."""
        if share.kind == "mig":
            return pool.mig is not None and pool.mig.profile in share.profiles
        model = (pool.gpu_model or self.onprem_model).lower()
        return bool(pool.shards_per_gpu) and share.gres_type.lower() in ("", model)

    def runs_onprem(self, job: Job) -> bool:
        hit = self._onprem_partition.get(job.partition)
        if hit is None:
            hit = bool(set(job.partitions) & self.onprem_parts)
            self._onprem_partition[job.partition] = hit
        return hit

    def job_class(self, job: Job) -> JobClass:
        """What the policy says of the job's (partition, qos), worked out once per policy."""
        key = (job.partition, job.qos)
        hit = self._ranks.job_classes.get(key)
        if hit is None:
            wp = self.policy.waiting.for_job(job.partition, job.qos)
            hit = self._ranks.job_classes[key] = JobClass(
                wait=wp,
                spot_ok=not (wp.urgent or not wp.spot_allowed),
                runs_onprem=self.runs_onprem(job),
                default_runtime_s=wp.default_runtime_s or self.policy.onprem.fallback_runtime_s,
            )
        return hit

    def ranked(self, job: Job, model: str, spot_ok: bool, runtime: float) -> list[Candidate]:
        key = (job.gpus, model, job.partition, spot_ok, int(math.log2(runtime + 1.0)))
        hit = self._pass_ranks.get(key)
        if hit is None:
            hit = self._ranks.get(key)
            if hit is None:
                hit = rank(self.candidates(job, model, spot_ok), runtime, self.policy.spot)
                self._ranks.put(key, hit)
            self._pass_ranks[key] = hit
        return hit

    def candidates(self, job: Job, model: str, spot_ok: bool) -> list[Candidate]:
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
                self.pools_for(job),
                self.catalog,
                caps,
                self.policy.spot,
                self.policy.onprem.equivalent_gpu_models,
            )
        return hit

    def full_pools(self, ranked: Sequence[Candidate]) -> frozenset[str] | None:
        """The pools of `ranked` when every one of them is at its max size, else None."""
        full = self._full.get(id(ranked))
        if full is not None:
            return full  # pools only fill up during a pass: full once, full for the rest
        pools = self._pools_of.get(id(ranked))
        if pools is None:
            pools = frozenset(c.pool for c in ranked)
            self._pools_of[id(ranked)] = pools
        for name in pools:
            if self.pool_nodes.get(name, 0) < self.max_nodes(name):
                return None
        self._full[id(ranked)] = pools
        return pools

    def max_nodes(self, pool: str) -> int:
        """The pool's max size, by name (Policy.pool scans the list: a dict look-up here)."""
        hit = self._pool_max.get(pool)
        if hit is None:
            hit = self._pool_max[pool] = self.policy.pool(pool).max_nodes
        return hit

    def fallbacks(self, d: Decision, chosen: Candidate, nodes: int) -> tuple[OfferKey, ...]:
        """What the actuator may try after `chosen`, in order; backed-off offers are left out
        (the actuator skips them too, should one be backed off by the time it acts)."""
        memo: tuple[object, ...] | None = None
        keys: tuple[OfferKey, ...] | None = None
        if d.team_headroom_usd is None:
            # No team budget to fit: the expected costs (which vary with the runtime) do not
            # matter, only which offers were passed over why, their $/h and the $/h headroom.
            listed = tuple(
                (a.offer, a.usd_per_hour, a.chosen, a.rejected_because) for a in d.alternatives
            )
            memo = (chosen.pool, chosen.key, chosen.gpus_per_node, nodes,
                    d.global_headroom_usd_hr, listed)  # fmt: skip
            keys = self._ranks.fallbacks(memo)
        if keys is None:
            keys = fallback_offers(
                d,
                self.policy.pool(chosen.pool),
                chosen.key,
                chosen.gpus_per_node,
                nodes,
                self.catalog,
                self.policy.onprem.equivalent_gpu_models,
            )
            if memo is not None:
                self._ranks.put_fallbacks(memo, keys)
        if not self.backoff.entries:
            return keys
        return tuple(k for k in keys if not self.backoff.blocked(k, self.now))

    def first_allowed(
        self, ranked: Sequence[Candidate], team: str, runtime: float, planned_nodes: int
    ) -> FirstAllowed:
        """The cheapest of `ranked` that passes every guardrail (back-off, the pool's max size,
        the per-pass max, the global $/h cap and the team's monthly budget). Every scale-up,
        the planner's own and the ones Slurm asks for, goes through here."""
        alts: list[Alternative] = []
        blocked: ReasonCode | None = None
        spot = self.policy.spot
        cap_nodes = self.policy.guardrails.max_scale_up_nodes_per_pass
        for at, cand in enumerate(ranked):
            why: Rejection | None = None
            expected: Decimal | None = None
            if self.backoff.blocked(cand.key, self.now):
                why, code = Rejection.BACKOFF, ReasonCode.BLOCKED_BACKOFF
            elif self.pool_nodes.get(cand.pool, 0) + cand.nodes > self.max_nodes(cand.pool):
                why, code = Rejection.POOL_MAX, ReasonCode.BLOCKED_POOL_MAX
            elif planned_nodes + cand.nodes > cap_nodes:
                why, code = Rejection.PASS_MAX, ReasonCode.BLOCKED_POOL_MAX
            else:
                expected = usd(cand.expected_cost(runtime, spot))
                verdict = self.budget.allows(cand.usd_hr, team, expected)
                if verdict is not None:
                    why, code = _BUDGET_REJECTION[verdict], verdict
            if why:
                blocked = blocked or code
                if len(alts) < MAX_ALTERNATIVES:
                    if expected is None:
                        expected = usd(cand.expected_cost(runtime, spot))
                    alts.append(Alternative(cand.key, cand.usd_hr, expected, False, why))
                continue
            assert expected is not None
            alts.append(Alternative(cand.key, cand.usd_hr, expected, True))
            return FirstAllowed(at, alts, blocked)
        return FirstAllowed(-1, alts, blocked)
