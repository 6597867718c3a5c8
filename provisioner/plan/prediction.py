"""Prediction: place pending jobs on-prem in queue order, and keep those whose predicted start is
within their waiting budget (or nearer than a cloud node could boot); the rest will burst.

Jobs that cannot start now (held, or before their begin time) buy nothing; a job Slurm held after
a failed launch goes back to a burst partition.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from typing import NamedTuple

from provisioner.config.models import WaitPolicy
from provisioner.domain.jobs import Job
from provisioner.domain.plan import ReasonCode, ReleaseJobs
from provisioner.plan.planning_pass import JobClass, PlanningPass, planned_runtime, runtime_detail
from provisioner.plan.profile import INF, OnPremProfile, Placement
from provisioner.plan.ranking import Candidate
from provisioner.plan.share_profile import build_share_profiles, share_verdict


class BurstingJob(NamedTuple):
    """A job that will not stay on-prem, with what prediction found for it."""

    job: Job
    wait: WaitPolicy
    runtime: float  # the runtime planned with
    start: float  # its predicted on-prem start (INF: never on-prem)
    budget: float  # its waiting budget, seconds from submit
    ranked: list[Candidate]  # its offers, ranked once here


@dataclass
class Bursting:
    """The jobs that will not stay on-prem, in queue order.

    Kept as columns, not as a record per job: a pass may hold 100,000 of them, and containers
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

    def __iter__(self) -> Iterator[BurstingJob]:
        columns = (self.jobs, self.waits, self.runtimes, self.starts, self.budgets, self.rankings)
        return map(BurstingJob._make, zip(*columns, strict=True))


@dataclass(slots=True)
class _Verdict:
    """Where prediction left one job: its start and budget, whether it stays on-prem, and
    which decision (if any) already said why it waits."""

    start: float
    budget: float
    stay: bool
    placement: Placement | None
    ranked: list[Candidate]
    explained: bool = False  # a WAIT_FASTER_THAN_BOOT or WAIT_UNCERTAIN_RUNTIME was made


def hedge_fraction(job: Job, wp: WaitPolicy) -> float:
    """The share of its budget a job waits before it may burst (the no-regret rule, see
    WaitPolicy): 0 decides at arrival, 1 waits the whole budget."""
    if job.expected_runtime_s is None:
        # No estimate: the start is predicted from assumed runtimes. A time limit alone is
        # trusted (an upper bound the user chose), unless the policy takes it as a guess.
        trusted = job.time_limit_s is not None and not wp.hedge_limits
        return 0.0 if trusted else wp.hedge_unknown
    if not job.runtime_source:
        return 0.0  # given as is (a user's estimate, or exact in a simulator run)
    spread = job.runtime_spread_s
    if spread is None or job.expected_runtime_s <= 0:
        return wp.hedge_unknown
    return min(wp.hedge_unknown, spread / job.expected_runtime_s / wp.hedge_cv)


def queue_order(jobs: Sequence[Job]) -> list[Job]:
    """Jobs in queue order, by (submit time, job id). Two stable sorts on one attribute each
    give that order without building a key tuple for each of 100,000 jobs."""
    if len(jobs) < 2:  # a simulator's pass often holds one job
        return list(jobs)
    out = sorted(jobs, key=attrgetter("job_id"))
    out.sort(key=attrgetter("submit_ts"))
    return out


def predict(p: PlanningPass, prof: OnPremProfile) -> Bursting:
    """Place pending jobs on-prem in queue order; return those that should burst."""
    out = Bursting()
    now = p.now
    onprem_total = prof.total_gpus  # a sum over the nodes: once per pass, not once per job
    shares: dict[str, OnPremProfile] | None = None  # built on the first job asking for parts
    for job in queue_order(p.snap.pending):
        if not job.can_start(now):
            if not (job.launch_failed and release(p, job)):
                not_eligible(p, job)
            continue
        jc = p.job_class(job)  # memoised per policy in the caller's RankCache
        # Job.runtime_estimate_s and planned_runtime(), inlined: this loop runs for every job.
        est = job.expected_runtime_s
        if est is None:
            est = job.time_limit_s
        runtime = jc.default_runtime_s if est is None else est
        if job.share is not None and not job.gpus:  # parts of GPUs only: see share_profile.py
            if shares is None:
                shares = build_share_profiles(p.snap, p.policy, now)
            bursts = share_verdict(p, shares, job, jc, runtime, est)
            if bursts is not None:
                out.add(job, jc.wait, runtime, *bursts)
            continue
        model = job.gpu_type.lower() if job.gpu_type else p.onprem_model
        onprem_ok = jc.runs_onprem and model in p.onprem_models
        placement = prof.earliest(job.gpus, now, runtime, now) if onprem_ok else None
        if placement is not None:  # starts at once: the common case, kept inline
            prof.commit(placement, now + runtime)
            p.predicted[job.job_id] = now
            continue
        v = _when_not_at_once(p, prof, job, jc, runtime, est, model, onprem_ok, onprem_total)
        if v.stay:
            _stay(p, prof, job, jc.wait, runtime, v)
            continue
        out.add(job, jc.wait, runtime, v.start, v.budget, v.ranked)
    return out


def _when_not_at_once(
    p: PlanningPass,
    prof: OnPremProfile,
    job: Job,
    jc: JobClass,
    runtime: float,
    est: float | None,
    model: str,
    onprem_ok: bool,
    onprem_total: int,
) -> _Verdict:
    """A job that cannot start on-prem now: its predicted start against its waiting budget."""
    now, wp = p.now, jc.wait
    urgent = wp.urgent
    ranked = p.ranked(job, model, jc.spot_ok, runtime)
    cheapest = ranked[0].expected_cost(runtime, p.policy.spot) if ranked else None
    budget = wp.job_budget_s(
        job.gpus,
        est,
        cheapest,
        learned=bool(job.runtime_source),
        spread_s=job.runtime_spread_s,
        limit_s=job.time_limit_s,
        cost_at=lambda s: ranked[0].expected_cost(s, p.policy.spot) if ranked else None,
    )
    boot = ranked[0].boot_s if ranked else INF
    # Only a start by the budget (or before a cloud node could boot) matters.
    latest = now if urgent else max(job.submit_ts + budget, now + boot)
    placement = None
    if onprem_ok:
        placement = prof.earliest(job.gpus, now, runtime, latest=latest, known_not_now=True)
    # When the search stopped at `latest`, the start is only known to lie beyond it.
    start = placement.start_ts if placement is not None else INF
    if placement is None and onprem_ok and latest < INF:
        start = latest + 1.0
        p.beyond.add(job.job_id)
    v = _Verdict(start, budget, False, placement, ranked)
    v.stay = start <= now if urgent else start - job.submit_ts <= budget
    if not v.stay and not urgent and placement is not None and start - now <= boot:
        p.decide(
            ReasonCode.WAIT_FASTER_THAN_BOOT,
            (job.job_id,),
            predicted_wait_s=start - now,
            wait_budget_s=budget,
            detail={"boot_s": f"{boot:.0f}", **runtime_detail(job, runtime)},
        )
        v.stay = v.explained = True
    if not v.stay and not urgent and onprem_ok:
        v.stay = v.explained = _hedged(p, job, wp, runtime, v, onprem_total)
    return v


def _hedged(
    p: PlanningPass, job: Job, wp: WaitPolicy, runtime: float, v: _Verdict, onprem_total: int
) -> bool:
    """No regret: a start predicted from a guessed runtime does not send the job to the cloud
    before it has waited its share of the budget (unless it could never run on-prem at all)."""
    share = hedge_fraction(job, wp)
    if not (share > 0 and p.now - job.submit_ts < share * v.budget and job.gpus <= onprem_total):
        return False
    p.decide(
        ReasonCode.WAIT_UNCERTAIN_RUNTIME,
        (job.job_id,),
        predicted_wait_s=v.start - p.now,
        wait_budget_s=v.budget,
        detail={"burst_after_s": f"{share * v.budget:.0f}", **runtime_detail(job, runtime)},
    )
    return True


def _stay(
    p: PlanningPass, prof: OnPremProfile, job: Job, wp: WaitPolicy, runtime: float, v: _Verdict
) -> None:
    """The job waits on-prem: its slots are committed, and its wait is explained."""
    if v.placement is not None:
        prof.commit(v.placement, v.start + runtime)
        p.predicted[job.job_id] = v.start
    if not (wp.urgent or v.explained or v.start - p.now <= 0):
        p.decide(
            ReasonCode.WAIT_WITHIN_BUDGET,
            (job.job_id,),
            predicted_wait_s=v.start - p.now,
            wait_budget_s=v.budget,
            detail=runtime_detail(job, runtime),
        )


def release(p: PlanningPass, job: Job) -> bool:
    """A job Slurm held after a failed launch can only launch on a cloud node (see
    `Job.launch_failed`): it goes back to the queue in the burst partition of its cheapest
    fitting pool. Nothing is bought here: Slurm powers a node up for it, and that power-up
    is planned with every guardrail. False when no pool can hold it."""
    jc = p.job_class(job)
    model = job.gpu_type.lower() if job.gpu_type else p.onprem_model
    ranked = p.ranked(job, model, jc.spot_ok, planned_runtime(job, p.policy, jc.wait))
    if not ranked:
        return False
    d = p.decide(
        ReasonCode.RELEASE_LAUNCH_FAILED,
        (job.job_id,),
        pool=ranked[0].pool,
        detail={"why": "held by Slurm after a failed launch: back in a burst partition"},
    )
    p.actions.append(ReleaseJobs(ranked[0].pool, (job.job_id,), d))
    return True


def not_eligible(p: PlanningPass, job: Job) -> None:
    """Held, or not to start before its begin time: no capacity now, on-prem or cloud, can
    run it, so none is bought (after a failed boot Slurm delays the requeued jobs)."""
    if job.held or job.eligible_ts is None:
        why = "held by Slurm until released"
    else:  # the time itself, not a countdown: the verdict stays the same from pass to pass
        begin = datetime.fromtimestamp(job.eligible_ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        why = f"Slurm will not start it before {begin} (begin time)"
    p.decide(ReasonCode.WAIT_NOT_ELIGIBLE, (job.job_id,), detail={"why": why})
