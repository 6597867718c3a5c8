"""Event-driven trace replay: one on-prem cluster, one burst policy, the real planner.

The on-prem cluster is the planner's slot model (see plan/profile.py) with the jobs' true
runtimes: FIFO list scheduling with gang placement, no preemption. With `--estimate exact` the
planner sees the same runtimes, so its predictions are exact; with `--estimate none` it sees no
runtimes and plans on its own estimated view of the cluster, while the world runs on the truth:
a job kept on-prem that has not started when its waiting budget runs out bursts then (timeout).
With `--estimate history` the planner sees runtimes learned online from the jobs that have
ended so far (plan/history.py: the user's last two, then the group's, then the partition's),
with their spread, and plans on its own view as with `none`.

Regret: the cloud dollars spent on jobs that on-prem would have started before their cloud node
was ready (and, more broadly, within the job's budget computed from its true runtime).

Cloud nodes boot for `boot_s`, are billed per second from request to the end of their last job
(60 s minimum), and go away when their jobs end. Spot nodes may be interrupted (optional): the
job loses `rework_fraction` of its progress and resumes on on-demand capacity.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from provisioner.config.models import Policy, PoolPolicy
from provisioner.domain.errors import InputError, InvalidArgument, NotKnown
from provisioner.domain.gpu_share import MIG_COMPUTE_SLICES, slices_for_milli
from provisioner.domain.jobs import Job
from provisioner.domain.money import rounded
from provisioner.domain.offers import CapacityType
from provisioner.domain.plan import ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.plan.catalog import Catalog
from provisioner.plan.history import LEVELS, RuntimeHistory
from provisioner.plan.offers import Candidate, ranked_offers
from provisioner.plan.planner import hedge_fraction, plan
from provisioner.plan.profile import OnPremProfile, Placement
from provisioner.plan.rank_cache import RankCache
from provisioner.simulate.slice_pool import SlicePool, mig_gpus_of
from provisioner.simulate.trace import TraceJob, records_limits
from provisioner.simulate.user_estimates import assign_estimates

Estimate = Literal["exact", "none", "history", "limits", "history+limits"]
BILLING_MIN_S = 60.0
_HOUR = Decimal(3600)
UNLIMITED_NODES = 10**9


@dataclass(frozen=True)
class SimSettings:
    onprem_gpus: int
    gpus_per_node: int = 8
    boot_s: float = 300.0
    estimate: Estimate = "exact"
    spot_interruptions: bool = False
    seed: int = 7
    billing_min_s: float = BILLING_MIN_S
    # --estimate limits: the largest time limit users may give (None: the trace's longest
    # runtime, rounded up to a whole day); limits are drawn from the published model.
    max_limit_s: float | None = None
    # Jobs with a share of a GPU (trace column gpu_milli): "pack" gives each the slices of its
    # smallest MIG profile, "round-up" a whole GPU (7 slices), on the same MIG GPUs and nodes.
    fractional: Literal["pack", "round-up"] = "pack"
    # On-prem GPUs MIG-partitioned for them (None: the fractional jobs' share of the trace's
    # GPU time, each counted as a whole GPU, of the on-prem GPUs).
    mig_gpus: int | None = None


@dataclass
class SimResult:
    policy: str
    jobs: int
    cloud_cost_usd: Decimal
    cloud_gpu_hours: float
    onprem_gpu_utilization: float
    avg_jct_s: float
    avg_wait_s: float
    p95_wait_s: float
    p99_wait_s: float
    max_wait_s: float
    burst_fraction: float
    wall_s: float = 0.0
    onprem_gpu_hours: float = 0.0
    onprem_gpu_hours_after_last_arrival: float = 0.0
    timeouts: int = 0
    spot_interruptions: int = 0
    regret_usd: float = 0.0
    regret_jobs: int = 0
    regret_within_budget_usd: float = 0.0
    regret_within_budget_jobs: int = 0
    # Billed cloud GPUs as a step function: (seconds since the first arrival, GPUs from then on).
    cloud_gpus_over_time: tuple[tuple[float, int], ...] = ()
    # Fractional traces only: jobs with a share of a GPU, how they ran, the MIG GPUs on-prem.
    fractional_jobs: int = 0
    fractional_mode: str = ""
    mig_gpus: int = 0
    cloud_mig_nodes: int = 0
    cloud_mig_usd: Decimal = Decimal(0)  # what those nodes billed (in cloud_cost_usd too)

    def to_dict(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "jobs": self.jobs,
            "cloud_cost_usd": float(round(self.cloud_cost_usd, 2)),
            "cloud_gpu_hours": round(self.cloud_gpu_hours, 1),
            "onprem_gpu_utilization": round(self.onprem_gpu_utilization, 4),
            "avg_jct_s": round(self.avg_jct_s, 1),
            "avg_wait_s": round(self.avg_wait_s, 1),
            "p95_wait_s": round(self.p95_wait_s, 1),
            "p99_wait_s": round(self.p99_wait_s, 1),
            "max_wait_s": round(self.max_wait_s, 1),
            "burst_fraction": round(self.burst_fraction, 4),
            "wall_s": round(self.wall_s, 3),
            "onprem_gpu_hours": round(self.onprem_gpu_hours, 1),
            "onprem_gpu_hours_after_last_arrival": round(
                self.onprem_gpu_hours_after_last_arrival, 1
            ),
            "timeouts": self.timeouts,
            "spot_interruptions": self.spot_interruptions,
            "regret_usd": round(self.regret_usd, 2),
            "regret_jobs": self.regret_jobs,
            "regret_within_budget_usd": round(self.regret_within_budget_usd, 2),
            "regret_within_budget_jobs": self.regret_within_budget_jobs,
            "cloud_gpus_over_time": [[round(t, 1), n] for t, n in self.cloud_gpus_over_time],
        } | (
            {
                "fractional_jobs": self.fractional_jobs,
                "fractional_mode": self.fractional_mode,
                "mig_gpus": self.mig_gpus,
                "cloud_mig_nodes": self.cloud_mig_nodes,
                "cloud_mig_usd": float(round(self.cloud_mig_usd, 2)),
            }
            if self.fractional_jobs
            else {}
        )


MAX_SERIES_POINTS = 2000


def gpus_over_time(
    spans: Sequence[tuple[float, float, int]], origin: float
) -> tuple[tuple[float, int], ...]:
    """The step function of GPUs billed at once, from (start, end, GPUs) spans. Past
    `MAX_SERIES_POINTS` steps, each bucket of steps keeps its peak (for a chart, not for sums)."""
    deltas: dict[float, int] = {}
    for start, end, gpus in spans:
        deltas[start] = deltas.get(start, 0) + gpus
        deltas[end] = deltas.get(end, 0) - gpus
    steps: list[tuple[float, int]] = []
    level = 0
    for t in sorted(deltas):
        if deltas[t]:
            level += deltas[t]
            steps.append((t - origin, level))
    if len(steps) > MAX_SERIES_POINTS:
        size = math.ceil(len(steps) / MAX_SERIES_POINTS)
        steps = [
            (steps[i][0], max(n for _, n in steps[i : i + size]))
            for i in range(0, len(steps), size)
        ]
    return tuple(steps)


def sim_pools(catalog: Catalog, policy: Policy, boot_s: float) -> list[PoolPolicy]:
    """Unlimited pools over every cloud and region of the catalog, for what-if replays."""
    pools = []
    for cloud in sorted({o.cloud for o in catalog}):
        regions = sorted({o.region for o in catalog if o.cloud == cloud})
        pools.append(
            PoolPolicy(
                name=f"sim-{cloud}",
                cloud=cloud,  # type: ignore[arg-type]
                regions=regions,
                gpu_model=policy.onprem.gpu_model,
                capacity="any",
                max_nodes=UNLIMITED_NODES,
                boot_seconds=boot_s,
            )
        )
    return pools


def flat_catalog(price_per_gpu_hour: Decimal, gpu_model: str, sizes: Sequence[int]) -> Catalog:
    """One on-demand price per GPU-hour, any size: per-GPU-second billing, no spot."""
    from provisioner.domain.offers import Offer

    offers = tuple(
        Offer(
            cloud="sim",
            region="flat",
            instance_type=f"gpu-x{g}",
            gpu_model=gpu_model,
            gpus_per_node=g,
            gpu_mem_gb=None,
            vcpus=0,
            mem_gb=0.0,
            ondemand_usd_hr=price_per_gpu_hour * g,
        )
        for g in sorted(set(sizes))
    )
    return Catalog(offers, source=f"flat ${price_per_gpu_hour}/GPU-h")


class _Cloud:
    """Bills cloud nodes and tracks when jobs on them start and end."""

    def __init__(
        self, risk_seed: int, interruptions: bool, policy: Policy, billing_min_s: float
    ) -> None:
        self.billing_min_s = billing_min_s
        self.cost = Decimal(0)
        self.gpu_seconds = 0.0
        self.spans: list[tuple[float, float, int]] = []  # (start, end, GPUs) of each node group
        self.span_usd_s: list[float] = []  # each span's dollars per second
        # the submit time of the job whose decision bought each span (never decreasing)
        self.span_asked: list[float] = []
        self.asking = 0.0  # the submit time of the job being decided now
        self.rng = random.Random(risk_seed)
        self.interruptions = interruptions
        self.spot = policy.spot
        self.interrupted = 0

    def bill(self, cand: Candidate, seconds: float, start: float) -> None:
        secs = max(self.billing_min_s, seconds)
        self.cost += cand.usd_hr * rounded(secs, 3) / _HOUR
        self.gpu_seconds += cand.gpus_per_node * cand.nodes * secs
        self.spans.append((start, start + secs, cand.gpus_per_node * cand.nodes))
        self.span_usd_s.append(float(cand.usd_hr) / 3600.0)
        self.span_asked.append(self.asking)

    def run(
        self,
        cand: Candidate,
        requested_at: float,
        durations: Sequence[float],
        fallback: Callable[[], Candidate],
    ) -> list[float]:
        """Run jobs packed on one node group from `requested_at`; return each job's end."""
        ready = requested_at + cand.boot_s
        longest = max(durations)
        if self.interruptions and cand.key.capacity is CapacityType.SPOT:
            rate = cand.interruption_pct / 100.0 / (self.spot.reference_hours * 3600.0)
            t_int = self.rng.expovariate(rate) if rate > 0 else math.inf
            if t_int < longest:
                self.interrupted += 1
                self.bill(cand, cand.boot_s + t_int, requested_at)
                od = fallback()
                ends = []
                kept = t_int * (1.0 - self.spot.rework_fraction)
                rest = [max(0.0, d - kept) if d > t_int else 0.0 for d in durations]
                again = ready + t_int
                if max(rest) > 0:
                    self.bill(od, od.boot_s + max(rest), again)
                for d, r in zip(durations, rest, strict=True):
                    ends.append(ready + d if r == 0.0 else again + od.boot_s + r)
                return ends
        self.bill(cand, cand.boot_s + longest, requested_at)
        return [ready + d for d in durations]


class Simulation:
    def __init__(
        self,
        jobs: Sequence[TraceJob],
        settings: SimSettings,
        policy: Policy,
        catalog: Catalog,
        policy_name: str,
    ) -> None:
        self.jobs = jobs
        self.s = settings
        self.catalog = catalog
        pools = sim_pools(catalog, policy, settings.boot_s)
        self.policy = policy.model_copy(update={"pools": pools})
        self.name = policy_name
        self.kind, self.fixed_wait = _parse_policy(policy_name)
        self.frac = [j.fractional for j in jobs]
        self.mig_gpus = (
            mig_gpus_of(jobs, settings.onprem_gpus, settings.mig_gpus) if any(self.frac) else 0
        )
        self.whole_gpus = settings.onprem_gpus - self.mig_gpus
        nodes = max(1, math.ceil(self.whole_gpus / settings.gpus_per_node))
        caps = [settings.gpus_per_node] * nodes
        # A GPU count that is not a multiple of the node size leaves the last node partial.
        caps[-1] -= nodes * settings.gpus_per_node - self.whole_gpus
        self.true = OnPremProfile(caps, 0.0, settings.gpus_per_node)
        # The planner's view when it knows no runtimes; the same object when it does.
        self.view = self.true if settings.estimate == "exact" else self.true.copy()
        self.cloud = _Cloud(
            settings.seed, settings.spot_interruptions, self.policy, settings.billing_min_s
        )
        self.wait = [0.0] * len(jobs)
        self.jct = [0.0] * len(jobs)
        self.in_cloud = [False] * len(jobs)
        self.onprem_runs: list[tuple[float, float, float]] = []  # (start, end, GPUs)
        self._mig_billed = False
        self._mig_usd = Decimal(0)
        self.timeouts = 0
        # (when, seq, placement in the planner's view, slot value held there, true end)
        self.events: list[tuple[float, int, Placement, float, float]] = []
        self._seq = 0
        self._trimmed = 0.0
        self._rank_memo: dict[tuple[int, bool, int], list[Candidate]] = {}
        self._ranks = RankCache(self.catalog, self.policy)  # the planner's, kept across events
        self._cand_memo: dict[tuple[str, object, int], Candidate] = {}
        wp = self.policy.waiting.for_job("onprem", "")
        self._wp = wp
        self._fallback_rt = wp.default_runtime_s or self.policy.onprem.fallback_runtime_s
        # --estimate history: learned from jobs as they end, (end, index) in a heap until then.
        learns = settings.estimate in ("history", "history+limits")
        self.history = RuntimeHistory() if learns else None
        # --estimate limits: each job's time limit, the trace's or drawn (simulate/user_estimates)
        self.limits: Sequence[float | None] | None = (
            job_limits(jobs, settings.max_limit_s, settings.seed)
            if settings.estimate in ("limits", "history+limits")
            else None
        )
        self._ends: list[tuple[float, int]] = []
        # What the planner was told about each job: (runtime, source, spread), or None.
        self._told: list[tuple[float, str, float | None] | None] = [None] * len(jobs)
        # --estimate exact: job -> (ready, budget end, true start) looked up before this
        # event's plan (see _regret_ahead).
        self._ahead: dict[int, tuple[float, float, float]] = {}
        self.regret_usd = self.regret_budget_usd = 0.0
        self.regret_jobs = self.regret_budget_jobs = 0
        # True once adopt() has run: decisions may change kind, so every kind keeps the view.
        self.switching = False
        self._submits: list[float] | None = None
        self.slices = (
            SlicePool(self.mig_gpus, self._cheapest_on_demand(settings.gpus_per_node))
            if any(self.frac)
            else None
        )
        self._check_runnable()

    def _check_runnable(self) -> None:
        """Every job must fit somewhere the policy may put it: a job no node set can hold
        would otherwise wait forever, so it is an input error, named, before the replay."""
        seen: set[int] = set()
        for job in self.jobs:
            if job.fractional:
                if self.kind == "never" and not self.mig_gpus:
                    raise self._too_big(job, "policy never cannot run it: no MIG GPUs on-prem")
                continue
            if job.gpus in seen:
                continue
            seen.add(job.gpus)
            if job.gpus <= self.whole_gpus:
                continue
            if self.kind == "never":
                raise self._too_big(job, "policy never cannot run it")
            if not self._ranked(job.gpus, False, 3600.0):
                model = self.policy.onprem.gpu_model
                raise self._too_big(job, f"no on-demand {model} offer in the catalog holds it")

    def _too_big(self, job: TraceJob, why: str) -> InputError:
        mig = f" ({self.mig_gpus} more are MIG-partitioned)" if self.mig_gpus else ""
        return InputError(
            f"trace job {job.job_id} needs {job.gpus} GPUs, more than the "
            f"{self.whole_gpus} on-prem GPUs{mig}: {why}"
        )

    # ---- offers ----------------------------------------------------------------------------

    def _ranked(self, gpus: int, spot_ok: bool, runtime: float) -> list[Candidate]:
        """Every sim pool's offers for `gpus` GPUs, cheapest expected cost first (memoised by
        runtime bucket, as the planner does)."""
        key = (gpus, spot_ok, int(math.log2(runtime + 1.0)))
        hit = self._rank_memo.get(key)
        if hit is None:
            caps = (
                (CapacityType.ON_DEMAND, CapacityType.SPOT)
                if spot_ok
                else (CapacityType.ON_DEMAND,)
            )
            hit = ranked_offers(
                gpus,
                self.policy.onprem.gpu_model,
                self.policy.pools,
                self.catalog,
                caps,
                self.policy.spot,
                runtime,
            )
            self._rank_memo[key] = hit
        return hit

    def _cheapest_on_demand(self, gpus: int) -> Candidate:
        ranked = self._ranked(gpus, False, 3600.0)
        if not ranked:
            raise InvalidArgument(
                f"no on-demand {self.policy.onprem.gpu_model} offer holds {gpus} GPUs"
            )
        return ranked[0]

    # ---- outcomes --------------------------------------------------------------------------

    def _onprem(self, i: int, job: TraceJob, place: Placement) -> None:
        end = place.start_ts + job.duration_s
        self.true.commit(place, end)
        self.wait[i] = place.start_ts - job.submit_s
        self.jct[i] = end - job.submit_s
        self.onprem_runs.append((place.start_ts, end, job.gpus))
        if self.history is not None:
            heapq.heappush(self._ends, (end, i))

    def _burst(
        self,
        idxs: Sequence[int],
        cand: Candidate,
        at: float,
        onprem_start: float | None = None,
    ) -> None:
        """Run jobs in the cloud from `at`. `onprem_start`: when on-prem would have started
        the (single) job, if known; else it is looked up for the regret figures."""
        ready = at + cand.boot_s
        self.cloud.asking = self.jobs[idxs[0]].submit_s
        for i in idxs:
            self._regret(i, cand, ready, onprem_start)
        durations = [self.jobs[i].duration_s for i in idxs]
        ends = self.cloud.run(
            cand, at, durations, lambda: self._cheapest_on_demand(self.jobs[idxs[0]].gpus)
        )
        for i, end in zip(idxs, ends, strict=True):
            job = self.jobs[i]
            self.in_cloud[i] = True
            self.wait[i] = ready - job.submit_s
            self.jct[i] = end - job.submit_s
            if self.history is not None:
                heapq.heappush(self._ends, (end, i))

    def _regret(self, i: int, cand: Candidate, ready: float, onprem_start: float | None) -> None:
        """Count a burst that on-prem would have started before the cloud node was ready, or
        within the job's budget (the budget its true runtime gives)."""
        job = self.jobs[i]
        ahead = self._ahead.get(i)
        if onprem_start is None and ahead is not None and ahead[0] == ready:
            _, within, onprem_start = ahead
        else:
            within = job.submit_s + self._budget(job, job.duration_s)
            if onprem_start is None:
                onprem_start = self._true_start(i, max(ready, within))
        if onprem_start > max(ready, within):
            return
        # The job's share of what its node group bills: its GPUs, for boot + its runtime.
        secs = max(self.s.billing_min_s, cand.boot_s + job.duration_s)
        usd = float(cand.usd_hr) / (cand.gpus_per_node * cand.nodes) * job.gpus * secs / 3600
        if onprem_start <= ready:
            self.regret_usd += usd
            self.regret_jobs += 1
        if onprem_start <= within:
            self.regret_budget_usd += usd
            self.regret_budget_jobs += 1

    def _true_start(self, i: int, latest: float) -> float:
        """When the true cluster would start job i, kept from its arrival, if by `latest`
        (else inf). Later arrivals cannot delay it (conservative backfilling)."""
        job = self.jobs[i]
        place = self.true.earliest(job.gpus, job.submit_s, job.duration_s, latest=latest)
        return place.start_ts if place is not None else math.inf

    def _regret_ahead(self, rest: Sequence[int], now: float) -> None:
        """`--estimate exact`: the regret look-up of each job the planner is about to see,
        done before it plans. The true cluster (the planner's view) is the same then as when a
        burst asks, and the planner's copy inherits the profile's record of what cannot start
        by when: it asks the same of each job, so it need not search again for those that
        burst."""
        self._ahead.clear()
        ready = now + self.s.boot_s  # every sim pool boots in boot_s (see sim_pools)
        for i in rest:
            job = self.jobs[i]
            within = job.submit_s + self._budget(job, job.duration_s)
            self._ahead[i] = (ready, within, self._true_start(i, max(ready, within)))

    def _learn(self, now: float) -> None:
        """Feed the runtime history every job that has ended by now."""
        hist, ends = self.history, self._ends
        assert hist is not None
        while ends and ends[0][0] <= now:
            _, i = heapq.heappop(ends)
            job = self.jobs[i]
            hist.observe(
                user=job.user, group=job.group, partition="onprem", runtime_s=job.duration_s
            )

    def _tell(self, i: int) -> tuple[float, str, float | None] | None:
        """What the planner knows of job i's runtime: exact, learned, or nothing."""
        job = self.jobs[i]
        if self.s.estimate == "exact":
            exact = (job.duration_s, "", None)
            self._told[i] = exact
            return exact
        limit = self.limits[i] if self.limits is not None else None
        if self.history is None:
            told_limit = None if limit is None else (limit, "limit", None)
            self._told[i] = told_limit
            return told_limit
        # a learned runtime never beyond the job's own limit, the limit with nothing learned
        # (plan/history.py's rule, as the controller predicts)
        pred = self.history.predict(
            user=job.user, group=job.group, partition="onprem", time_limit_s=limit
        )
        told = None if pred is None else (pred.runtime_s, pred.source, pred.spread_s)
        self._told[i] = told
        return told

    def _watch(self, place: Placement, held: float, true_end: float) -> None:
        self._seq += 1
        heapq.heappush(self.events, (min(held, true_end), self._seq, place, held, true_end))

    def _drain_events(self, until: float, rerun_s: float) -> None:
        """Planner-view updates in `--estimate none` runs: ends and timeouts become known."""
        ev = self.events
        while ev and ev[0][0] <= until:
            when, _, place, held, true_end = heapq.heappop(ev)
            if true_end <= when:  # the job ended (or left the queue): its slots free up now
                self.view.retime(place, held, when)
            else:
                # Its estimate ran out but it still runs. Runtimes are heavy-tailed, so expect
                # it to run about as long again as it has so far (and at least rerun_s).
                more = max(rerun_s, when - place.start_ts)
                self.view.retime(place, held, when + more)
                self._watch(place, when + more, true_end)

    # ---- policies --------------------------------------------------------------------------

    def _baseline(self, i: int, job: TraceJob) -> None:
        now = job.submit_s
        place = self.true.earliest(job.gpus, now, job.duration_s)
        if self.kind == "never":
            assert place is not None, f"job {job.job_id} needs more GPUs than on-prem has"
            self._onprem(i, job, place)
            return
        if self.kind == "immediate":
            limit = 0.0
        elif self.kind == "fixed-wait":
            limit = self.fixed_wait
        else:  # budget-timeout: the default budget, but waiting it out instead of predicting
            self._tell(i)
            limit = self._told_budget(i)
        if place is not None and place.start_ts - now <= limit:
            self._onprem(i, job, place)
            if self.switching and self.view is not self.true:
                self._on_view(i, job, place)
            return
        if limit > 0:
            self.timeouts += 1
        start = place.start_ts if place is not None else math.inf
        self._burst([i], self._cheapest_on_demand(job.gpus), now + limit, start)

    def _planned(self, batch: Sequence[int], now: float) -> None:
        exact = self.s.estimate == "exact"
        fallback_rt = self._fallback_rt
        told = {i: self._tell(i) for i in batch}
        # Jobs the planner would place at once (its first step, in queue order) need no
        # planner call: they stay on-prem and get no decision. Placing that prefix here, on the
        # view the planner would copy, leaves it the same state for the rest of the batch.
        view = self.view
        kept: list[tuple[int, Placement, float, float]] = []
        k = 0
        for i in batch:
            job = self.jobs[i]
            t = told[i]
            runtime = t[0] if t is not None else fallback_rt
            vplace = view.earliest(job.gpus, now, runtime, latest=now)
            if vplace is None:
                break
            k += 1
            if exact:
                self._onprem(i, job, vplace)
            else:
                vend = vplace.start_ts + runtime
                view.commit(vplace, vend)
                kept.append((i, vplace, vend, 1.0))
        rest = batch[k:]
        burst: set[int] = set()
        hedged: dict[int, float] = {}
        if rest and exact:
            self._regret_ahead(rest, now)
        if rest:
            snap = ClusterSnapshot(
                taken_ts=now,
                jobs=tuple(self._job(i, told[i]) for i in rest),
            )
            result = plan(
                snap, self.policy, self.catalog, Backoff(), now, onprem=view, ranks=self._ranks
            )
            for action in result.scale_ups:
                idxs = [int(j) for j in action.job_ids]
                burst.update(idxs)
                cand = self._candidate_of(action.pool, action.offer, self.jobs[idxs[0]].gpus)
                self._burst(idxs, cand, now)
            self._ahead.clear()  # the true cluster changes from here on
            for d in result.decisions:
                if d.reason is ReasonCode.WAIT_UNCERTAIN_RUNTIME:
                    i = int(d.job_ids[0])
                    hedged[i] = hedge_fraction(snap.jobs[rest.index(i)], self._wp)
        for i, vplace, vend, share in kept:
            self._kept_blind(i, vplace, vend, share)
        for i in rest:
            if i in burst:
                continue
            job = self.jobs[i]
            if job.gpus > self.whole_gpus:
                # too big for on-prem, and a guardrail (the per-pass node cap, the global $/h
                # cap) held it back: in the trace's world it would wait for ever
                jid = f"{i:09d}"
                why = next((d.reason.value for d in result.decisions if jid in d.job_ids), "")
                raise self._too_big(job, f"the planner would not burst it ({why or 'no decision'})")
            if exact:
                place = self.true.earliest(job.gpus, now, job.duration_s)
                assert place is not None  # it fits on-prem (above): some time it starts
                self._onprem(i, job, place)
                continue
            # The planner kept the job on-prem from its own view (estimated runtimes).
            t = told[i]
            runtime = t[0] if t is not None else fallback_rt
            vplace = view.earliest(job.gpus, now, runtime)
            assert vplace is not None
            vend = vplace.start_ts + runtime
            view.commit(vplace, vend)
            self._kept_blind(i, vplace, vend, hedged.get(i, 1.0))

    def _fractional(self, i: int, job: TraceJob) -> None:
        """A job with a share of a GPU: on-prem MIG slices if they start it within its limit
        (the kind's, or the default budget for its share of a node's price), else a cloud MIG
        node. Exact runtimes let the default policy burst at arrival; otherwise it waits its
        limit out first (no regret, as budget-timeout)."""
        pool = self.slices
        assert pool is not None
        whole = self.s.fractional == "round-up"
        slices = MIG_COMPUTE_SLICES if whole else slices_for_milli(job.gpu_milli)
        now, d = job.submit_s, job.duration_s
        if self.kind == "never":
            limit = math.inf
        elif self.kind == "immediate":
            limit = 0.0
        elif self.kind == "fixed-wait":
            limit = self.fixed_wait
        else:
            limit = self._slice_budget(i, job, slices)
        place = pool.earliest_onprem(slices, now, d, now + limit)
        if place is not None:
            pool.run_onprem(place, d)
            start, end = place.start_ts, place.start_ts + d
            self.onprem_runs.append((start, end, slices / MIG_COMPUTE_SLICES))
        else:
            at = now if self.kind == "default" and self.s.estimate == "exact" else now + limit
            if at > now:
                self.timeouts += 1
            start, end = pool.burst(slices, at, d)
            self.in_cloud[i] = True
        self.wait[i] = start - now
        self.jct[i] = end - now
        if self.history is not None:
            heapq.heappush(self._ends, (end, i))

    def _slice_budget(self, i: int, job: TraceJob, slices: int) -> float:
        """The default budget of a job that needs `slices` MIG slices: its runtime's, priced at
        its slices' share of a whole cloud node (never below it), at least a node's boot."""
        pool = self.slices
        assert pool is not None
        self._tell(i)
        share = slices / (pool.gpus_per_node * MIG_COMPUTE_SLICES)
        usd_s = float(pool.node.usd_hr) * share / 3600.0
        budget = self._told_budget(i, cost_at=lambda secs: usd_s * (pool.node.boot_s + secs))
        return max(budget, pool.node.boot_s) if self.kind == "default" else budget

    def _on_view(self, i: int, job: TraceJob, place: Placement) -> None:
        """A job placed without the planner, on the planner's blind view too (with the runtime
        it was told), so that a later switch to the planner sees it."""
        t = self._told[i]
        runtime = t[0] if t is not None else self._fallback_rt
        vplace = self.view.earliest(job.gpus, job.submit_s, runtime)
        assert vplace is not None
        vend = vplace.start_ts + runtime
        self.view.commit(vplace, vend)
        self._watch(vplace, vend, place.start_ts + job.duration_s)

    def _job(self, i: int, told: tuple[float, str, float | None] | None) -> Job:
        """The job as the controller's planner would see it: a job told only its time limit
        carries the limit and no estimate, as one read from Slurm does (the planner then plans
        with the limit and trusts it, see hedge_fraction); a learned runtime carries its
        source and spread."""
        tj = self.jobs[i]
        if told is not None and told[1] == "limit":
            told = None
        return Job(
            job_id=f"{i:09d}",
            gpus=tj.gpus,
            submit_ts=tj.submit_s,
            account=tj.group,
            user=tj.user,
            expected_runtime_s=told[0] if told is not None else None,
            runtime_source=told[1] if told is not None else "",
            runtime_spread_s=told[2] if told is not None else None,
            time_limit_s=self.limits[i] if self.limits is not None else None,
        )

    def _kept_blind(self, i: int, vplace: Placement, vend: float, share: float) -> None:
        """A job the planner kept on-prem from its estimated view: it starts when the true
        cluster can start it, or bursts when its share of the budget runs out first (the whole
        budget, unless the planner kept it only to wait and see: see hedge_fraction)."""
        job = self.jobs[i]
        now = job.submit_s
        place = self.true.earliest(job.gpus, now, job.duration_s)
        assert place is not None
        deadline = job.submit_s + share * self._told_budget(i)
        if place.start_ts <= deadline:
            self._onprem(i, job, place)
            self._watch(vplace, vend, place.start_ts + job.duration_s)
        else:
            self.timeouts += 1
            self._watch(vplace, vend, deadline)
            self._burst([i], self._best_now(job), deadline, place.start_ts)

    def _budget(
        self,
        job: TraceJob,
        known_runtime: float | None,
        told: tuple[float, str, float | None] | None = None,
        limit: float | None = None,
        cost_at: Callable[[float], float | None] | None = None,
    ) -> float:
        """The default policy's waiting budget for a job, as the planner computes it
        (WaitPolicy.job_budget_s): `told` is what the planner was told of its runtime, whose
        source and spread, with its time `limit`, decide whether a guess is distrusted.
        `cost_at(seconds)`: the job's expected cloud cost (default: its cheapest offer's)."""
        wp, spot = self._wp, self.policy.spot
        runtime = known_runtime if known_runtime is not None else self._fallback_rt
        if cost_at is None:
            ranked = self._ranked(job.gpus, wp.spot_allowed, runtime)
            cost_at = lambda s: ranked[0].expected_cost(s, spot) if ranked else None  # noqa: E731
        return wp.job_budget_s(
            job.gpus,
            known_runtime,
            cost_at(runtime),
            learned=told is not None and told[1] in LEVELS,
            spread_s=told[2] if told is not None else None,
            limit_s=limit,
            cost_at=cost_at,
        )

    def _told_budget(self, i: int, cost_at: Callable[[float], float | None] | None = None) -> float:
        """Job i's waiting budget from what the planner was told of it."""
        t = self._told[i]
        limit = self.limits[i] if self.limits is not None else None
        return self._budget(self.jobs[i], t[0] if t is not None else None, t, limit, cost_at)

    def _best_now(self, job: TraceJob) -> Candidate:
        return self._ranked(job.gpus, self._wp.spot_allowed, self._fallback_rt)[0]

    def _candidate_of(self, pool: str, key: object, gpus: int) -> Candidate:
        """The candidate behind a planned scale-up (the planner returns only its key)."""
        memo = (pool, key, gpus)
        hit = self._cand_memo.get(memo)
        if hit is None:
            hit = next(
                (c for c in self._ranked(gpus, True, 3600.0) if c.pool == pool and c.key == key),
                None,
            )
            if hit is None:
                raise NotKnown(f"planned offer {key} not in catalog")
            self._cand_memo[memo] = hit
        return hit

    # ---- run -------------------------------------------------------------------------------

    def step(self, i: int) -> int:
        """Decide the jobs that arrive at jobs[i]'s submit time; return the index after them."""
        jobs = self.jobs
        n = len(jobs)
        now = jobs[i].submit_s
        j = i
        while j < n and jobs[j].submit_s == now:
            j += 1
        if self.history is not None:
            self._learn(now)
        if self.events and (self.kind == "default" or self.switching):
            self._drain_events(now, self._fallback_rt)
        batch: Sequence[int] = range(i, j)
        if self.slices is not None:
            batch = [k for k in batch if not self.frac[k]]
            for k in range(i, j):
                if self.frac[k]:
                    self._fractional(k, jobs[k])
        if self.kind == "default":
            self._planned(batch, now)
        else:
            for k in batch:
                self._baseline(k, jobs[k])
        if now - self._trimmed > 3600.0:
            self.true.forget_before(now)
            if self.slices is not None:
                self.slices.forget_before(now)
            if self.view is not self.true:
                self.view.forget_before(now)
            self._trimmed = now
        return j

    def run(self, tick: Callable[[int], None] | None = None) -> SimResult:
        import time

        t0 = time.perf_counter()
        n = len(self.jobs)
        i = 0
        while i < n:
            j = self.step(i)
            if tick is not None:
                tick(j - i)
            i = j
        return self.result(time.perf_counter() - t0)

    # ---- policy selection (simulate/adaptive.py) ------------------------------------------

    def adopt(self, policy: Policy, kind: str) -> None:
        """From the next arrival on, decide as `kind` under `policy` (its pools are the sim's).
        Jobs already decided keep their outcome; the blind view, the runtime history and both
        clusters carry over."""
        if self.slices is not None:
            raise InputError("--policy adaptive does not replay fractional jobs yet")
        self.switching = True
        self.policy = policy.model_copy(update={"pools": self.policy.pools})
        self.kind = kind
        self._ranks = RankCache(self.catalog, self.policy)
        self._rank_memo.clear()
        self._cand_memo.clear()
        self._wp = self.policy.waiting.for_job("onprem", "")
        self._fallback_rt = self._wp.default_runtime_s or self.policy.onprem.fallback_runtime_s

    def window_score(self, since: float, now: float) -> tuple[float, float, int]:
        """(cloud dollars, average JCT, jobs) of the jobs submitted in [since, now), as known at
        `now`: the dollars their decisions were billed by then, and each JCT cut at `now` (a
        job still waiting or running counts the time it has spent so far)."""
        from bisect import bisect_left

        if self._submits is None:
            self._submits = [j.submit_s for j in self.jobs]
        subs = self._submits
        a, b = bisect_left(subs, since), bisect_left(subs, now)
        jct, n = self.jct, b - a
        avg = sum(min(jct[k], now - subs[k]) for k in range(a, b)) / n if n else 0.0
        c = self.cloud
        lo, hi = bisect_left(c.span_asked, since), bisect_left(c.span_asked, now)
        usd = 0.0
        for k in range(lo, hi):
            start, end, _ = c.spans[k]
            if start < now:
                usd += c.span_usd_s[k] * (min(end, now) - start)
        return usd, avg, n

    def result(self, wall: float) -> SimResult:
        jobs = self.jobs
        pool = self.slices
        if pool is not None and not self._mig_billed:
            self._mig_billed = True
            before = self.cloud.cost
            for node in pool.cloud:
                self.cloud.bill(pool.node, node.end - node.requested, node.requested)
            self._mig_usd = self.cloud.cost - before
        n = len(jobs)
        waits = sorted(self.wait)
        first = jobs[0].submit_s if jobs else 0.0
        last = jobs[-1].submit_s if jobs else 0.0
        window = max(1.0, last - first)
        inside = after = total = 0.0
        for start, end, gpus in self.onprem_runs:
            total += (end - start) * gpus
            inside += max(0.0, min(end, last) - max(start, first)) * gpus
            after += max(0.0, end - max(start, last)) * gpus

        def pct(q: float) -> float:
            if not waits:
                return 0.0
            return waits[min(n - 1, math.ceil(q * n) - 1)]

        return SimResult(
            policy=self.name,
            jobs=n,
            cloud_cost_usd=self.cloud.cost,
            cloud_gpu_hours=self.cloud.gpu_seconds / 3600.0,
            onprem_gpu_utilization=inside / (self.s.onprem_gpus * window)
            if self.s.onprem_gpus
            else 0.0,
            avg_jct_s=sum(self.jct) / n if n else 0.0,
            avg_wait_s=sum(self.wait) / n if n else 0.0,
            p95_wait_s=pct(0.95),
            p99_wait_s=pct(0.99),
            max_wait_s=waits[-1] if waits else 0.0,
            burst_fraction=sum(self.in_cloud) / n if n else 0.0,
            wall_s=wall,
            onprem_gpu_hours=total / 3600.0,
            onprem_gpu_hours_after_last_arrival=after / 3600.0,
            timeouts=self.timeouts,
            spot_interruptions=self.cloud.interrupted,
            regret_usd=self.regret_usd,
            regret_jobs=self.regret_jobs,
            regret_within_budget_usd=self.regret_budget_usd,
            regret_within_budget_jobs=self.regret_budget_jobs,
            cloud_gpus_over_time=gpus_over_time(self.cloud.spans, first),
            fractional_jobs=sum(self.frac),
            fractional_mode=self.s.fractional if pool is not None else "",
            mig_gpus=self.mig_gpus,
            cloud_mig_nodes=len(pool.cloud) if pool is not None else 0,
            cloud_mig_usd=self._mig_usd,
        )


POLICY_KINDS = ("default", "never", "immediate", "fixed-wait", "budget-timeout")


def _parse_policy(name: str) -> tuple[str, float]:
    if name.startswith("fixed-wait:"):
        raw = name.split(":", 1)[1]
        try:
            secs = float(raw)
        except ValueError:
            raise InvalidArgument(f"policy {name!r}: SECONDS must be a number") from None
        if secs < 0:
            raise InvalidArgument(f"policy {name!r}: SECONDS must be >= 0")
        return "fixed-wait", secs
    if name in POLICY_KINDS and name != "fixed-wait":
        return name, 0.0
    raise InvalidArgument(
        f"unknown policy {name!r}: use default, never, immediate, budget-timeout "
        "or fixed-wait:SECONDS"
    )


def job_limits(
    jobs: Sequence[TraceJob], max_limit_s: float | None, seed: int
) -> Sequence[float | None]:
    """Each job's time limit: the trace's own where it records any (a job without one has
    none), else from the published model of user estimates, the largest allowed being
    `max_limit_s` (None: the longest runtime rounded up to a whole day)."""
    if records_limits(jobs):
        return [j.time_limit_s for j in jobs]
    longest = max((j.duration_s for j in jobs), default=0.0)
    top = max_limit_s if max_limit_s is not None else math.ceil(longest / 86_400) * 86_400.0
    return assign_estimates([j.duration_s for j in jobs], int(max(top, 3600.0)), seed)


def simulate(
    jobs: Sequence[TraceJob],
    settings: SimSettings,
    policy: Policy,
    catalog: Catalog,
    policy_name: str,
    tick: Callable[[int], None] | None = None,
) -> SimResult:
    return Simulation(jobs, settings, policy, catalog, policy_name).run(tick)
