"""Scheduler nodes, on-prem and burst, and the GPU load measured on them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from provisioner.domain.gpu_share import NodeShares


class NodeKind(StrEnum):
    ONPREM = "onprem"
    BURST = "burst"


class NodeState(StrEnum):
    IDLE = "idle"
    MIXED = "mixed"
    ALLOCATED = "allocated"
    DRAINING = "draining"
    DRAINED = "drained"
    POWERING_UP = "powering_up"
    POWERED_DOWN = "powered_down"
    POWERING_DOWN = "powering_down"
    DOWN = "down"
    UNKNOWN = "unknown"

    @property
    def usable(self) -> bool:
        """Can take new work now (or after power-up for cloud nodes)."""
        return self in (NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU as NVML saw it at `sampled_ts`."""

    index: int
    uuid: str
    util_pct: float
    mem_used_mib: float = 0.0
    mem_total_mib: float = 0.0
    power_w: float | None = None
    energy_mj: float | None = None
    temperature_c: float | None = None
    sampled_ts: float = 0.0


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    kind: NodeKind
    gpus: int
    gpus_alloc: int = 0
    gpu_type: str = ""
    state: NodeState = NodeState.IDLE
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    weight: int = 1
    pool: str = ""
    instance_id: str = ""
    idle_since_ts: float | None = None
    gpu_load: tuple[GpuSample, ...] = field(default=())
    # Slurm's NodeAddr: where slurmctld sends this node's work ("" when not reported; the
    # node's name while nothing set it)
    address: str = ""
    # Slurm's Reason for a drained, down or failed node ("" when none): who set it and why
    reason: str = ""
    # Its MIG devices and shards (parts of GPUs, not counted in `gpus`); None when it has none
    shares: NodeShares | None = None

    @property
    def physical_gpus(self) -> int:
        """Whole GPUs plus the GPUs its MIG devices are cut from (shards share whole GPUs)."""
        return self.gpus + (self.shares.mig_gpus if self.shares is not None else 0)

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus - self.gpus_alloc)

    def gpus_idle_by_nvml(self, util_threshold_pct: float) -> bool | None:
        """True when every GPU measured is under the threshold; None when nothing was measured."""
        if not self.gpu_load:
            return None
        return all(s.util_pct < util_threshold_pct for s in self.gpu_load)
