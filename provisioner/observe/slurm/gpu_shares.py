"""Parts of GPUs in Slurm's words: MIG devices (GPU GRES whose type names a MIG profile) and
shards (the `shard` GRES), in job requests and in node GRES.

Measured on the project's clusters (docs/slurm.md, "Parts of GPUs"):
- a job: `tres_per_node` `gres:gpu:1g.10gb:2` (22.05) or `gres/gpu:1g.10gb:2` (24.11), and
  `gres:shard:3` / `gres/shard:3`;
- a node: `Gres=gpu:a100:2,gpu:1g.10gb:7,shard:a100:8,shard:1g.10gb:0`; in use,
  `shard:a100:3(3/4,0/4)` on 24.11 (shards used/held per GPU), but `shard:a100:1(IDX:0)` on
  22.05, whose count there is the GPUs with shards in use, not shards.
"""

from __future__ import annotations

import re
from dataclasses import replace

from provisioner.domain.gpu_share import (
    MigDevices,
    NodeShares,
    ShareRequest,
    flexible_share,
    mig_profile_of,
)

_TRES_ITEM = re.compile(r"(?:^|,)\s*(?:gres[:/])?(gpu|shard)(?::([A-Za-z0-9_.\-]+))?[:=](\d+)")
_GRES_ITEM = re.compile(r"(?:^|,)\s*(gpu|shard)(?::([A-Za-z0-9_.\-]+))?:(\d+)(?:\(([^)]*)\))?")
_PER_GPU = re.compile(r"(\d+)/(\d+)")


def split_tres(spec: str) -> tuple[int, str, ShareRequest | None]:
    """(whole GPUs, their type, any request for parts of GPUs) in a TRES request string.
    Slurm may list a request both untyped and typed (`gres/gpu=2,gres/gpu:1g.10gb=2`): the
    untyped total counts once, less the MIG devices it includes."""
    if not spec or spec in ("(null)", "N/A"):
        return 0, "", None
    untyped = typed = mig = 0
    shards_untyped = shards_typed = 0
    gtype = mig_type = shard_type = ""
    for m in _TRES_ITEM.finditer(spec):
        name, t, c = m.group(1), m.group(2) or "", int(m.group(3))
        if name == "shard":
            if t:
                shards_typed += c
                shard_type = shard_type or t
            else:
                shards_untyped += c
        elif t and mig_profile_of(t) is not None:
            mig += c
            mig_type = mig_type or t
        elif t:
            typed += c
            gtype = gtype or t
        else:
            untyped += c
    whole = max(typed, untyped - mig) if untyped else typed
    shards = shards_untyped or shards_typed
    share: ShareRequest | None = None
    if mig:
        share = ShareRequest("mig", mig, mig_type)
    elif shards:
        share = ShareRequest("shard", shards, "" if shards_untyped else shard_type)
    return whole, gtype, share


def scaled(share: ShareRequest | None, times: int) -> ShareRequest | None:
    """A per-node or per-task request over all the job's nodes or tasks."""
    if share is None or times <= 1:
        return share
    return replace(share, count=share.count * times)


def with_choice(
    gpus: int, gtype: str, share: ShareRequest | None, constraint: str
) -> tuple[int, ShareRequest | None]:
    """(whole GPUs, parts) once the job's constraint is read: untyped GPUs with a choice of
    classes naming a MIG profile are parts of GPUs that may take other classes too
    (`flexible_share`); anything else stays as requested."""
    if share is not None or gtype or not gpus:
        return gpus, share
    flexible = flexible_share(gpus, constraint)
    return (0, flexible) if flexible is not None else (gpus, share)


def node_shares(gres: str, gres_used: str) -> NodeShares | None:
    """A node's MIG devices and shards from its GRES and GRES in use; None when it has none."""
    total: dict[str, int] = {}
    shards = 0
    for m in _GRES_ITEM.finditer(gres or ""):
        name, t, c = m.group(1), m.group(2) or "", int(m.group(3))
        if name == "shard":
            shards += c
        elif t and mig_profile_of(t) is not None:
            total[t] = total.get(t, 0) + c
    if not total and not shards:
        return None
    used: dict[str, int] = {}
    shards_used: int | None = 0
    per_gpu = 0
    for m in _GRES_ITEM.finditer(gres_used or ""):
        name, t, c, detail = m.group(1), m.group(2) or "", int(m.group(3)), m.group(4) or ""
        if name == "shard":
            pairs = _PER_GPU.findall(detail)
            if pairs:
                shards_used = (shards_used or 0) + sum(int(a) for a, _ in pairs)
                per_gpu = max([per_gpu, *(int(b) for _, b in pairs)])
            elif c and shards_used is not None:
                shards_used = None  # 22.05: a count of GPUs, not of shards
        elif t in total:
            used[t] = used.get(t, 0) + c
    return NodeShares(
        mig=tuple(MigDevices(t, n, used.get(t, 0)) for t, n in sorted(total.items())),
        shards=shards,
        shards_used=shards_used,
        shards_per_gpu=per_gpu,
    )
