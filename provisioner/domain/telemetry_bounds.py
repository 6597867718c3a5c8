"""What a node's telemetry may claim, bounded by the hardware Slurm and the catalog know.

An agent token is bound to one node, but the node's sample is still the agent's word. These
checks hold it to what the controller knows from elsewhere:

- the node exists (Slurm shows it, or a cloud instance of ours carries its name);
- it reports no more physical GPUs than Slurm's GRES (or the instance type) gives it, each
  with an index below that count. On MIG nodes Slurm counts slices, which are never fewer than
  the physical GPUs, and a GPU holds at most `MAX_MIG_SLICES` MIG instances;
- no GPU draws more than its model's board power (`gpu_power`), lowered by the power limit
  its agent reports, never raised;
- job tags name jobs Slurm shows on that node (within a grace window); a tag that does not is
  dropped and counted, and the rest of the sample stands.

Pure: the caller gathers the node's hardware and the jobs allowed on it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from provisioner.domain.gpu_power import BoardPower, gpu_power_bound_w
from provisioner.domain.telemetry import GpuTelemetry

# NVIDIA's MIG user guide: A100 and H100 hold at most seven GPU instances each.
MAX_MIG_SLICES = 7

RULE_UNKNOWN_NODE = "unknown_node"
RULE_GPU_COUNT = "gpu_count"
RULE_GPU_INDEX = "gpu_index"
RULE_POWER = "board_power"
RULE_MIG_SLICES = "mig_slices"
RULE_JOB_TAG = "job_tag"
RULES = (
    RULE_UNKNOWN_NODE,
    RULE_GPU_COUNT,
    RULE_GPU_INDEX,
    RULE_POWER,
    RULE_MIG_SLICES,
    RULE_JOB_TAG,
)


@dataclass(frozen=True, slots=True)
class NodeHardware:
    """What the controller knows of a node's GPUs: how many and which model, and from where."""

    node: str
    gpus: int
    gpu_model: str = ""
    # "slurm" (the node's GRES), "instance" (its instance type) or "store" (the GPUs a
    # controller without a Slurm view finds stored for it)
    source: str = "slurm"


_SOURCES = {
    "slurm": "Slurm's GRES",
    "instance": "its instance type",
    "store": "the GPUs stored for it",
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a sample is refused: the rule it broke, the field, and a sentence for the agent."""

    rule: str
    loc: tuple[str | int, ...]
    message: str


def hardware_refusal(
    payload: GpuTelemetry,
    hw: NodeHardware | None,
    board: BoardPower,
    site_max_w: float,
) -> Refusal | None:
    """The first rule the sample breaks, None when it stands."""
    if hw is None:
        return Refusal(
            RULE_UNKNOWN_NODE,
            ("node",),
            f"node {payload.node!r} is not known to Slurm, nor a cloud instance of this "
            "controller: its telemetry is not kept",
        )
    where = _SOURCES.get(hw.source, hw.source)
    if len(payload.gpus) > hw.gpus:
        return Refusal(
            RULE_GPU_COUNT,
            ("gpus",),
            f"node {payload.node!r} has {hw.gpus} GPU(s) by {where}, the sample reports "
            f"{len(payload.gpus)}",
        )
    for i, g in enumerate(payload.gpus):
        if g.index >= hw.gpus:
            return Refusal(
                RULE_GPU_INDEX,
                ("gpus", i, "index"),
                f"GPU index {g.index} on node {payload.node!r}, which has {hw.gpus} GPU(s) "
                f"by {where} (indexes 0-{hw.gpus - 1})",
            )
        bound = gpu_power_bound_w(board, hw.gpu_model, site_max_w, g.power_limit_w)
        if g.power_w is not None and g.power_w > bound:
            model = hw.gpu_model or "an unknown model"
            return Refusal(
                RULE_POWER,
                ("gpus", i, "power_w"),
                f"power_w {g.power_w:g} is above the {bound:g} W a GPU of {model} can draw "
                "(its board power, or the limit the agent reports)",
            )
    return _mig_refusal(payload)


def _mig_refusal(payload: GpuTelemetry) -> Refusal | None:
    physical = {g.index for g in payload.gpus}
    per_gpu: dict[int, int] = {}
    for i, m in enumerate(payload.mig_instances):
        if m.gpu_index not in physical:
            return Refusal(
                RULE_MIG_SLICES,
                ("mig_instances", i, "gpu_index"),
                f"MIG instance on GPU {m.gpu_index}, which the sample does not report",
            )
        per_gpu[m.gpu_index] = per_gpu.get(m.gpu_index, 0) + 1
        if per_gpu[m.gpu_index] > MAX_MIG_SLICES:
            return Refusal(
                RULE_MIG_SLICES,
                ("mig_instances",),
                f"GPU {m.gpu_index} reports more than {MAX_MIG_SLICES} MIG instances",
            )
    return None


def drop_foreign_job_tags(
    payload: GpuTelemetry, allowed: Collection[str]
) -> tuple[GpuTelemetry, int]:
    """The sample without job tags outside `allowed`, and how many tags were dropped."""
    dropped = 0

    def keep(jobs: tuple[str, ...]) -> tuple[str, ...]:
        nonlocal dropped
        kept = tuple(j for j in jobs if j in allowed)
        dropped += len(jobs) - len(kept)
        return kept

    gpus = tuple(g.model_copy(update={"jobs": keep(g.jobs)}) for g in payload.gpus)
    migs = tuple(m.model_copy(update={"jobs": keep(m.jobs)}) for m in payload.mig_instances)
    jobs = tuple(j for j in payload.jobs if j.job_id in allowed)
    dropped += len(payload.jobs) - len(jobs)
    if not dropped:
        return payload, 0
    return payload.model_copy(update={"gpus": gpus, "mig_instances": migs, "jobs": jobs}), dropped


__all__ = [
    "MAX_MIG_SLICES",
    "RULES",
    "NodeHardware",
    "Refusal",
    "drop_foreign_job_tags",
    "hardware_refusal",
]
