"""The snapshot the planner sees: fresh NVML samples attached to the nodes, and (under
`health.allocated_idle_counts_busy: false`) allocated GPUs that NVML shows idle taken as free.

Pure functions; nothing mutates its input. `planning_view` is planning-only: its job GPU counts
are not Slurm's, so give it to `plan()`, not to the API or the accountant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from provisioner.config.models import Policy
from provisioner.domain.jobs import Job
from provisioner.domain.nodes import GpuSample, Node, NodeKind
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.domain.telemetry import (
    gpu_idle,
)


def attach_gpu_load(
    snapshot: ClusterSnapshot, loads: Mapping[str, tuple[GpuSample, ...]]
) -> ClusterSnapshot:
    """A new snapshot whose nodes carry `loads[node.name]` as `gpu_load` (and no samples when
    the node is not in `loads`, so nothing older is carried over). The input is not changed."""
    nodes = tuple(
        n if n.gpu_load == loads.get(n.name, ()) else replace(n, gpu_load=loads.get(n.name, ()))
        for n in snapshot.nodes
    )
    return replace(snapshot, nodes=nodes)


def allocated_idle_gpus(
    node: Node, util_threshold_pct: float, mem_threshold_mib: float | None
) -> int:
    """How many of the node's allocated GPUs NVML shows idle, at least.

    NVML does not say which GPUs Slurm allocated, so the unallocated ones are assumed to be
    among the idle ones first: max(0, idle - free), at most `gpus_alloc`.
    """
    idle = sum(
        1 for s in node.gpu_load if gpu_idle(s, util_threshold_pct, mem_threshold_mib) is True
    )
    return min(node.gpus_alloc, max(0, idle - node.gpus_free))


def planning_view(snapshot: ClusterSnapshot, policy: Policy) -> ClusterSnapshot:
    """The snapshot the planner should see under `health.allocated_idle_counts_busy` (see the
    module docstring). With the default (True) this is `snapshot` itself."""
    if policy.health.allocated_idle_counts_busy:
        return snapshot
    threshold = policy.guardrails.nvml_idle_util_pct
    mem = policy.health.idle_mem_used_mib
    freed: dict[str, int] = {}
    nodes: list[Node] = []
    for n in snapshot.nodes:
        k = allocated_idle_gpus(n, threshold, mem) if n.kind is NodeKind.ONPREM else 0
        if k > 0:
            freed[n.name] = k
            nodes.append(replace(n, gpus_alloc=n.gpus_alloc - k))
        else:
            nodes.append(n)
    if not freed:
        return snapshot
    jobs = _shrink_jobs(snapshot, policy, freed)
    return replace(snapshot, nodes=tuple(nodes), jobs=jobs)


def _shrink_jobs(
    snapshot: ClusterSnapshot, policy: Policy, freed: Mapping[str, int]
) -> tuple[Job, ...]:
    """Running single-node jobs with their idle GPUs taken away, soonest-ending first."""
    left = dict(freed)
    fallback = policy.onprem.fallback_runtime_s

    def expected_end(j: Job) -> float:
        start = j.start_ts if j.start_ts is not None else snapshot.taken_ts
        return start + (j.runtime_estimate_s or fallback)

    order = sorted(
        (j for j in snapshot.running if len(j.nodes) == 1 and j.nodes[0] in left),
        key=lambda j: (expected_end(j), j.job_id),
    )
    changed: dict[int, Job] = {}  # by identity: the snapshot's own objects
    for j in order:
        node = j.nodes[0]
        take = min(left[node], j.gpus)
        if take <= 0:
            continue
        left[node] -= take
        gpus = j.gpus - take
        changed[id(j)] = replace(j, gpus=gpus, nodes=j.nodes if gpus > 0 else ())
    return tuple(changed.get(id(j), j) for j in snapshot.jobs)
