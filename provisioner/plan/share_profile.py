"""On-prem parts of GPUs: when a job asking only for MIG devices or shards can start.

One availability profile per kind of part: `mig:<GRES type>` (Slurm matches a MIG request to
devices of exactly that type) and `shard`, with each on-prem node's count as its capacity and
the running jobs' parts held until their expected ends, as `build_profile` does for whole GPUs.
The planner does not burst parts of GPUs yet: a job that cannot start at once waits for them,
and its decision says when and why.
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.config.models import Policy
from provisioner.domain.gpu_share import ShareRequest
from provisioner.domain.jobs import Job
from provisioner.domain.nodes import Node, NodeKind
from provisioner.domain.plan import ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.planning_pass import PlanningPass, planned_runtime
from provisioner.plan.profile import OnPremProfile


def share_key(share: ShareRequest) -> str:
    return f"mig:{share.gres_type}" if share.kind == "mig" else "shard"


def _capacity(node: Node, key: str) -> int:
    s = node.shares
    if s is None or not node.state.usable:
        return 0
    if key == "shard":
        return s.shards
    return sum(d.total for d in s.mig if f"mig:{d.gres_type}" == key)


def build_share_profiles(
    snapshot: ClusterSnapshot, policy: Policy, now: float
) -> dict[str, OnPremProfile]:
    """A profile per kind of part that some on-prem node offers."""
    onprem = sorted(
        (n for n in snapshot.nodes if n.kind is NodeKind.ONPREM and n.shares is not None),
        key=lambda n: (n.weight, n.name),
    )
    keys = sorted(
        {f"mig:{d.gres_type}" for n in onprem if n.shares for d in n.shares.mig}
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


def wait_for_share(
    p: PlanningPass, profiles: dict[str, OnPremProfile], job: Job, runtime: float
) -> None:
    """Place a job asking only for parts of GPUs on the on-prem ones, in queue order; a job
    that cannot start at once gets a decision saying when, or that no on-prem node has them."""
    share = job.share
    assert share is not None
    prof = profiles.get(share_key(share))
    if prof is None or prof.total_gpus < share.count:
        have = prof.total_gpus if prof is not None else 0
        why = f"on-prem nodes offer {have} of the {share.count} it needs, and none is bought"
        p.decide(
            ReasonCode.WAIT_GPU_SHARE, (job.job_id,), detail={"share": share.label, "why": why}
        )
        return
    place = prof.earliest(share.count, p.now, runtime)
    assert place is not None  # it fits the on-prem total, so some time it starts
    prof.commit(place, place.start_ts + runtime)
    p.predicted[job.job_id] = place.start_ts
    if place.start_ts <= p.now:
        return
    p.decide(
        ReasonCode.WAIT_GPU_SHARE,
        (job.job_id,),
        predicted_wait_s=place.start_ts - p.now,
        detail={"share": share.label, "why": "parts of GPUs are not burst yet"},
    )
