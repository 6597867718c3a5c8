"""Shares of one GPU: NVIDIA MIG slices, and the slices a request for part of a GPU needs.

An A100 or H100 splits into 7 compute slices; the profiles a GPU can host are 1g, 2g, 3g, 4g and
7g (NVIDIA MIG User Guide, "Supported MIG Profiles"). Slurm names a MIG device's GRES type after
its profile (`AutoDetect=nvml`: `nvidia_a100_1g.10gb`, or a configured `1g.10gb`), so the
profile is read from the type wherever it appears in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from provisioner.domain.errors import InvalidArgument

MIG_COMPUTE_SLICES = 7
MIG_PROFILE_SLICES = (1, 2, 3, 4, 7)
WHOLE_GPU_MILLI = 1000
_MIG_TYPE = re.compile(r"(?:^|[^0-9])([1-7])g\.(\d+)gb", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile: compute slices (of 7) and memory in GB, as its name states them."""

    slices: int
    memory_gb: int

    @property
    def name(self) -> str:
        return f"{self.slices}g.{self.memory_gb}gb"

    @property
    def milli(self) -> int:
        """The share of a whole GPU's compute it holds, in thousandths."""
        return self.slices * WHOLE_GPU_MILLI // MIG_COMPUTE_SLICES


def mig_profile_of(gres_type: str) -> MigProfile | None:
    """The MIG profile a GRES type names (`1g.10gb`, `nvidia_a100_3g.40gb`), else None."""
    m = _MIG_TYPE.search(gres_type)
    if m is None:
        return None
    slices = int(m.group(1))
    if slices not in MIG_PROFILE_SLICES:
        return None
    return MigProfile(slices=slices, memory_gb=int(m.group(2)))


def slices_for_milli(milli: int) -> int:
    """The smallest MIG profile's slices that hold `milli` thousandths of a GPU's compute:
    a request of 470 needs 3.29 slices, so a 4g profile (5 and 6 slices have no profile)."""
    if not 0 < milli <= WHOLE_GPU_MILLI:
        raise InvalidArgument(f"gpu_milli {milli}: must be in 1..{WHOLE_GPU_MILLI}")
    need = -(-milli * MIG_COMPUTE_SLICES // WHOLE_GPU_MILLI)  # ceiling, in whole numbers
    return next(s for s in MIG_PROFILE_SLICES if s >= need)


def mig_key(gres_type: str) -> str:
    """What MIG devices of one GRES type are known by, in the planner's profiles and open
    burst nodes. As written: Slurm matches GRES types and features exactly."""
    return f"mig:{gres_type}"


def shards_key(gpu_model: str) -> str:
    """What shards of one GPU model are known by in the planner's open burst nodes."""
    return f"shard:{gpu_model.lower()}"


@dataclass(frozen=True, slots=True)
class ShareRequest:
    """A job's request for parts of GPUs, as Slurm states it: `count` MIG devices of the GRES
    type `gres_type` (`--gres=gpu:1g.10gb:2`), or `count` shards (`--gres=shard:2`, Slurm's
    GPU-sharing GRES; `gres_type` names a GPU type when the request does). Counts are the
    job's, over all its nodes."""

    kind: Literal["mig", "shard"]
    count: int
    gres_type: str = ""
    # Other GPU classes the job's constraint allows (`flexible_share`): MIG profiles, and GPU
    # models whose whole GPUs hold the need. Empty for a typed request: Slurm matches the type.
    also: tuple[str, ...] = ()

    @property
    def profile(self) -> MigProfile | None:
        return mig_profile_of(self.gres_type) if self.kind == "mig" else None

    @property
    def label(self) -> str:
        if self.also:
            return f"gpu:{self.count} ({'|'.join((self.gres_type, *self.also))})"
        typed = f":{self.gres_type}" if self.gres_type else ""
        return f"{'gpu' if self.kind == 'mig' else 'shard'}{typed}:{self.count}"

    @property
    def unit(self) -> ShareRequest:
        """The same request for one part: what jobs asking alike have in common."""
        return replace(self, count=1)

    @property
    def profiles(self) -> tuple[str, ...]:
        """The MIG GRES types the job may take devices of."""
        if self.kind != "mig":
            return ()
        return (self.gres_type, *(a for a in self.also if mig_profile_of(a) is not None))

    @property
    def models(self) -> tuple[str, ...]:
        """The GPU models (lower case) whose whole GPUs the job may take instead."""
        return tuple(a.lower() for a in self.also if mig_profile_of(a) is None)

    @property
    def part(self) -> str:
        """Which part of a GPU it holds, as a cost report groups it: the MIG devices' GRES
        type (`1g.10gb`), or `shard` (a shard's size depends on its node, not on the request)."""
        return (self.gres_type or "mig") if self.kind == "mig" else "shard"


_CHOICE_WORD = re.compile(r"^[A-Za-z0-9_.\-]+$")


def flexible_share(gpus: int, constraint: str) -> ShareRequest | None:
    """A request for parts of GPUs that may also take whole GPUs of other classes: untyped
    GPUs (`--gres=gpu:1`) with a constraint that is a choice of GPU classes naming at least one
    MIG profile (`--constraint="1g.10gb|t4|l4"`, or bracketed). Slurm gives an untyped request
    any GPU of a node whose features match, so the job's need is its smallest profile and it
    may run on any class named. None for any other constraint (`&`, counts, negation)."""
    text = constraint.strip()
    if gpus < 1 or not text:
        return None
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    words = [w.strip() for w in text.split("|")]
    if not all(_CHOICE_WORD.match(w) for w in words):
        return None
    named = [(p.slices, p.memory_gb, w) for w in words if (p := mig_profile_of(w)) is not None]
    if not named:
        return None
    need = min(named)[2]
    also = tuple(sorted({w for w in words if w != need}))
    return ShareRequest("mig", gpus, need, also)


@dataclass(frozen=True, slots=True)
class MigDevices:
    """A node's MIG devices of one GRES type: how many, and how many jobs hold."""

    gres_type: str
    total: int
    used: int = 0

    @property
    def profile(self) -> MigProfile | None:
        return mig_profile_of(self.gres_type)


@dataclass(frozen=True, slots=True)
class NodeShares:
    """What a node offers in parts of GPUs: its MIG devices, and its shards over its GPUs.
    `shards_per_gpu`: from Slurm's per-GPU figures (`shard:a100:3(3/4,0/4)`), else 0."""

    mig: tuple[MigDevices, ...] = ()
    shards: int = 0
    shards_used: int | None = 0  # None: Slurm did not say (22.05 counts GPUs, not shards)
    shards_per_gpu: int = 0

    @property
    def mig_gpus(self) -> int:
        """Physical GPUs its MIG devices fill, at 7 slices to a GPU (a device whose type names
        no profile counts as a GPU of its own)."""
        slices = sum(d.total * (d.profile.slices if d.profile else 7) for d in self.mig)
        return -(-slices // MIG_COMPUTE_SLICES)

    @property
    def mig_free(self) -> dict[str, int]:
        return {d.gres_type: d.total - d.used for d in self.mig}


def part_of_gpus(
    share: ShareRequest, nodes: int, where: NodeShares | None, whole_gpus: int
) -> float:
    """The share of one GPU a job's request holds on each of its `nodes` nodes: a MIG device
    its profile's slices of 7; a shard one of its GPU's shards (Slurm's per-GPU count, else the
    node's shards over its whole GPUs). 0 when the node's shards are not known."""
    per_node = share.count / max(1, nodes)
    if share.kind == "mig":
        p = share.profile
        return per_node * (p.slices if p is not None else MIG_COMPUTE_SLICES) / MIG_COMPUTE_SLICES
    if where is None or not where.shards:
        return 0.0
    per_gpu = where.shards_per_gpu or where.shards / max(1, whole_gpus)
    return min(per_node / per_gpu, float(max(1, whole_gpus)))
