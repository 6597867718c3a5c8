"""The controller's selection round: its recent window, from the jobs table, replayed once per
portfolio candidate and once under `immediate`, each scored as `--policy adaptive` scores them.

It runs in a process of its own (reconcile/policy_selection.py), so it takes and returns plain
data. What the jobs table gives, and what a replay makes of it:
- a job that ended ran `end - start`; one still running has run `now - start` so far, and one
  still pending is given its time limit, else the fallback runtime (a score reads nothing
  after `now`, so only how long each occupies on-prem before `now` matters);
- a job submitted before the window but alive in it arrives at the window's start, so the
  cluster is not empty there; it is not scored;
- on-prem is `onprem_gpus` GPUs in nodes of `gpus_per_node`, as the controller's profile
  counts them now; a job larger than that bursts at once under every candidate, so it is left
  out;
- runtimes are learned as the replay goes from an empty history, and each job is told its
  time limit as Slurm gave it (`--estimate history+limits`; `history` where no record has a
  limit), never below what it ran: Slurm's grace can let a job run past its limit, and a limit
  below the runtime would make the limit candidates' worst case wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provisioner.config.models import Policy
from provisioner.domain.job_records import JobRecord
from provisioner.plan.catalog import Catalog
from provisioner.plan.selection import PolicyCandidate, WindowScore
from provisioner.simulate.engine import SimSettings, Simulation
from provisioner.simulate.trace import TraceJob, records_limits


@dataclass(frozen=True)
class WindowReplay:
    since: float
    now: float
    jobs: int
    scores: tuple[WindowScore, ...]
    reference: WindowScore  # immediate's
    seconds: float  # CPU time the round took


def trace_of(
    records: Sequence[JobRecord], since: float, now: float, fallback_s: float, most_gpus: int
) -> list[TraceJob]:
    """The window's GPU jobs as a trace (see the module doc), in arrival order."""
    out: list[TraceJob] = []
    for r in records:
        if not 0 < r.gpus <= most_gpus or r.submit_ts >= now:
            continue
        if r.end_ts is not None and r.end_ts < since:
            continue
        if r.start_ts is not None:
            end = r.end_ts if r.end_ts is not None else now
            start = max(r.start_ts, since)
            runtime = max(1.0, end - start)
        else:
            runtime = r.time_limit_s or fallback_s
        arrive = max(r.eligible_ts or r.submit_ts, r.submit_ts)
        limit = None if r.time_limit_s is None else max(r.time_limit_s, runtime)
        out.append(
            TraceJob(
                job_id=r.job_id,
                submit_s=max(arrive, since - 1.0),
                duration_s=runtime,
                gpus=r.gpus,
                user=r.user,
                group=r.account,
                time_limit_s=limit,
            )
        )
    out.sort(key=lambda j: (j.submit_s, j.job_id))
    return out


def replay_window(
    records: Sequence[JobRecord],
    since: float,
    now: float,
    onprem_gpus: int,
    gpus_per_node: int,
    policy: Policy,
    catalog: Catalog,
    candidates: Sequence[PolicyCandidate],
) -> WindowReplay:
    import time

    t0 = time.process_time()
    jobs = trace_of(records, since, now, policy.onprem.fallback_runtime_s, onprem_gpus)
    settings = SimSettings(
        onprem_gpus=onprem_gpus,
        gpus_per_node=gpus_per_node,
        boot_s=min((p.boot_seconds for p in policy.pools), default=300.0),
        estimate="history+limits" if records_limits(jobs) else "history",
    )
    scores = tuple(
        WindowScore(c.name, *_replay(jobs, settings, c.policy(policy), catalog, c.kind, since, now))
        for c in candidates
    )
    ref = WindowScore(
        "immediate", *_replay(jobs, settings, policy, catalog, "immediate", since, now)
    )
    return WindowReplay(since, now, len(jobs), scores, ref, time.process_time() - t0)


def _replay(
    jobs: Sequence[TraceJob],
    settings: SimSettings,
    policy: Policy,
    catalog: Catalog,
    kind: str,
    since: float,
    now: float,
) -> tuple[float, float, int]:
    if not jobs:
        return 0.0, 0.0, 0
    sim = Simulation(jobs, settings, policy, catalog, kind)
    sim.run()
    return sim.window_score(since, now)
