"""Where a replay's fractional jobs run: MIG slices on-prem and on shared cloud nodes.

On-prem, `mig_gpus` of the cluster's GPUs are MIG-partitioned (a MIG layout is set per GPU and
changing it needs the GPU idle, so it is fixed for the replay); each holds 7 slices, and a job
takes the slices of the smallest profile that holds its share, on one GPU. In the cloud a
fractional job joins a running MIG node whose free slices hold it from now for its whole
runtime, the one whose life it lengthens least; else it buys a node. A node is billed whole,
from its request until its last job ends (the cloud bills the instance, not the slices).

Simplified: any mix of profiles up to 7 slices fits one GPU (real MIG also fixes where each
profile may sit on the GPU), and nodes leave as soon as their last job ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provisioner.domain.errors import InputError
from provisioner.domain.gpu_share import MIG_COMPUTE_SLICES
from provisioner.plan.offers import Candidate
from provisioner.plan.profile import OnPremProfile, Placement
from provisioner.simulate.trace import TraceJob


@dataclass
class CloudMigNode:
    requested: float
    ready: float
    end: float  # the end of its last job so far: it is billed until then
    slices: OnPremProfile  # one "node" per GPU, 7 slices each, from `ready` on
    jobs: int = 0
    trimmed: float = 0.0


class SlicePool:
    def __init__(self, mig_gpus: int, node: Candidate) -> None:
        self.onprem = OnPremProfile([MIG_COMPUTE_SLICES] * mig_gpus, 0.0, MIG_COMPUTE_SLICES)
        self.mig_gpus = mig_gpus
        self.node = node
        self.gpus_per_node = node.gpus_per_node * node.nodes
        self.cloud: list[CloudMigNode] = []
        self._live: list[CloudMigNode] = []

    def earliest_onprem(
        self, slices: int, now: float, duration: float, latest: float
    ) -> Placement | None:
        """Where and when on-prem slices could start the job, by `latest` (else None)."""
        if not self.mig_gpus:
            return None
        return self.onprem.earliest(slices, now, duration, latest=latest)

    def run_onprem(self, place: Placement, duration: float) -> None:
        self.onprem.commit(place, place.start_ts + duration)

    def burst(self, slices: int, at: float, duration: float) -> tuple[float, float]:
        """Run the job in the cloud from `at`: (start, end)."""
        best: tuple[float, CloudMigNode, Placement] | None = None
        for node in self._live:
            if node.requested > at or node.end < at:  # not bought yet, or already gone
                continue
            start = max(at, node.ready)
            found = node.slices.earliest(slices, start, duration, latest=start)
            if found is None:
                continue
            longer = max(0.0, start + duration - node.end)
            if best is None or longer < best[0]:
                best = (longer, node, found)
        if best is None:
            ready = at + self.node.boot_s
            node = CloudMigNode(
                requested=at,
                ready=ready,
                end=ready,
                slices=OnPremProfile(
                    [MIG_COMPUTE_SLICES] * self.gpus_per_node, ready, MIG_COMPUTE_SLICES
                ),
            )
            self.cloud.append(node)
            self._live.append(node)
            place = node.slices.earliest(slices, ready, duration, latest=ready)
            assert place is not None  # a new node's slices are all free
        else:
            _, node, place = best
        start = place.start_ts
        node.slices.commit(place, start + duration)
        node.end = max(node.end, start + duration)
        node.jobs += 1
        return start, start + duration

    def forget_before(self, now: float) -> None:
        """Nothing is asked before `now` from here on: drop the past."""
        self.onprem.forget_before(now)
        self._live = [n for n in self._live if n.end >= now]
        for node in self._live:
            if now - node.trimmed > 3600.0 and now > node.ready:
                node.slices.forget_before(now)
                node.trimmed = now


def mig_gpus_of(jobs: Sequence[TraceJob], onprem_gpus: int, asked: int | None) -> int:
    """The on-prem GPUs MIG-partitioned for fractional jobs: `asked`, else the fractional
    jobs' share of the trace's GPU time (each counted as a whole GPU), at least one. An
    operator sizes a layout from the workload mix; the replay takes the trace's."""
    if asked is not None:
        if not 0 <= asked <= onprem_gpus:
            raise InputError(
                f"--mig-gpus: must be in 0..{onprem_gpus} (the on-prem GPUs), got {asked}"
            )
        return asked
    total = sum(j.duration_s * j.gpus for j in jobs)
    frac = sum(j.duration_s for j in jobs if j.fractional)
    share = round(onprem_gpus * frac / total) if total else 0
    return min(onprem_gpus, max(1, share))
