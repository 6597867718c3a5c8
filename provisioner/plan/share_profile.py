"""On-prem parts of GPUs: when a job asking only for MIG devices or shards can start.

One availability profile per kind of part: `mig:<GRES type>` (Slurm matches a MIG request to
devices of exactly that type) and `shard`, with each on-prem node's count as its capacity and
the running jobs' parts held until their expected ends, as `build_profile` does for whole GPUs.
A job that cannot start within its budget bursts to a MIG or shard pool, or to a small whole
GPU its constraint names (`PlanningPass.share_candidates`); one with nowhere to go waits, and its
decision says when and why.
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.config.models import Policy
from provisioner.domain.gpu_share import ShareRequest, mig_key
from provisioner.domain.jobs import Job
from provisioner.domain.nodes import Node, NodeKind
from provisioner.domain.plan import ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.planning_pass import JobClass, PlanningPass, planned_runtime
from provisioner.plan.profile import INF, OnPremProfile
from provisioner.plan.ranking import Candidate


def share_key(share: ShareRequest) -> str:
    return mig_key(share.gres_type) if share.kind == "mig" else "shard"


def _capacity(node: Node, key: str) -> int:
    s = node.shares
    if s is None or not node.state.usable:
        return 0
    if key == "shard":
        return s.shards
    return sum(d.total for d in s.mig if mig_key(d.gres_type) == key)


def build_share_profiles(
    snapshot: ClusterSnapshot, policy: Policy, now: float
) -> dict[str, OnPremProfile]:
    """A profile per kind of part that some on-prem node offers."""
    onprem = sorted(
        (n for n in snapshot.nodes if n.kind is NodeKind.ONPREM and n.shares is not None),
        key=lambda n: (n.weight, n.name),
    )
    keys = sorted(
        {mig_key(d.gres_type) for n in onprem if n.shares for d in n.shares.mig}
        | ({"shard"} if any(n.shares and n.shares.shards for n in onprem) else set())
    )
    names = tuple(n.name for n in onprem)
    index = {name: i for i, name in enumerate(names)}
    profiles: dict[str, OnPremProfile] = {}
    for key in keys:
        caps = [_capacity(n, key) for n in onprem]
        prof = OnPremProfile(caps, now, max(caps or [0]), names)
        _hold_running(prof, caps, snapshot.running, key, index, policy, now)
        profiles[key] = prof
    return profiles


def _hold_running(
    prof: OnPremProfile,
    caps: list[int],
    running: Sequence[Job],
    key: str,
    index: dict[str, int],
    policy: Policy,
    now: float,
) -> None:
    holds: dict[int, list[tuple[float, int]]] = {}
    for job in running:
        if job.share is None or share_key(job.share) != key:
            continue
        on = [index[name] for name in job.nodes if name in index]
        if not on:
            continue
        start = job.start_ts if job.start_ts is not None else now
        end = max(start + planned_runtime(job, policy), now + 60.0)
        per_node = max(1, -(-job.share.count // len(on)))
        for idx in on:
            if caps[idx]:
                holds.setdefault(idx, []).append((end, min(per_node, caps[idx])))
    for idx, held in holds.items():
        prof.hold_from_start(idx, held)


def _profile_for(profiles: dict[str, OnPremProfile], share: ShareRequest) -> OnPremProfile | None:
    """The on-prem devices a job may take. One whose constraint allows several profiles is
    planned on the first that on-prem nodes offer; whole GPUs it may also take on-prem are not
    counted (it may start sooner than planned, never later)."""
    if share.kind != "mig":
        return profiles.get("shard")
    return next((profiles[k] for t in share.profiles if (k := mig_key(t)) in profiles), None)


def _no_pool(share: ShareRequest) -> str:
    if share.kind == "shard":
        return f"no shard pool offers {share.gres_type or 'shards'}"
    if not share.also:
        return f"no MIG pool offers {share.gres_type}"
    return f"no pool offers any of {'|'.join((share.gres_type, *share.also))}"


def share_verdict(
    p: PlanningPass,
    profiles: dict[str, OnPremProfile],
    job: Job,
    jc: JobClass,
    runtime: float,
    est: float | None,
) -> tuple[float, float, list[Candidate]] | None:
    """A job asking only for parts of GPUs, in queue order: it starts on free on-prem devices
    before anything bursts; one that cannot start within its budget (priced at its part of a
    MIG pool's node, never below) bursts to that pool: (predicted start, budget, offers).
    None: it stays, with a decision unless it starts at once."""
    share = job.share
    assert share is not None
    now = p.now
    prof = _profile_for(profiles, share)
    place = None
    if prof is not None and prof.total_gpus >= share.count:
        place = prof.earliest(share.count, now, runtime)
    start = place.start_ts if place is not None else INF
    if place is not None and start <= now:
        assert prof is not None
        prof.commit(place, start + runtime)
        p.predicted[job.job_id] = start
        return None
    ranked = p.share_candidates(job, jc.spot_ok, runtime)
    budget = INF
    if ranked:
        c = ranked[0]
        cost = p.share_cost(c, runtime, share)
        budget = 0.0 if jc.wait.urgent else jc.wait.job_budget_s(1, est, cost)
        boot = min(x.boot_s for x in ranked)
        if start - job.submit_ts > budget and start - now > boot:
            return start, budget, ranked
    about = {"share": share.label}
    if place is None:
        have = prof.total_gpus if prof is not None else 0
        why = f"on-prem nodes offer {have} of the {share.count} it needs"
        p.decide(
            ReasonCode.WAIT_GPU_SHARE,
            (job.job_id,),
            detail={**about, "why": f"{why}, and {_no_pool(share)}"},
        )
        return None
    assert prof is not None
    prof.commit(place, start + runtime)
    p.predicted[job.job_id] = start
    why = "within its waiting budget" if ranked else _no_pool(share)
    p.decide(
        ReasonCode.WAIT_GPU_SHARE,
        (job.job_id,),
        predicted_wait_s=start - now,
        wait_budget_s=budget if budget < INF else None,
        detail={**about, "why": why},
    )
    return None
