"""A fractional variant of a whole-GPU trace, by a seeded rule fixed before any measurement.

The rule copies the sub-GPU requests of Alibaba's production GPU cluster trace
(`alibaba/clusterdata`, cluster-trace-gpu-v2023, `csv/openb_pod_list_default.csv` at
50a91c7c74abe3b658188dc78ac1dd302970d40c; Weng, Yang et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023). Of its 6,989
one-GPU tasks, 3,078 (44.04%) ask for less than a whole GPU, with the `gpu_milli` counts below.

1. Each job of exactly one GPU draws u from `random.Random(seed)`, in trace order. Multi-GPU
   jobs draw nothing and stay whole (the Alibaba trace gives shares only to one-GPU tasks).
2. If u < 3078/6989 the job becomes fractional, and a second draw picks its `gpu_milli` from the
   counts below, weighted by count. Its submit time, runtime and names are unchanged.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from provisioner.simulate.trace import TraceJob

# gpu_milli -> tasks asking for it, among the trace's one-GPU tasks with gpu_milli < 1000
ALIBABA_2023_SUB_GPU: tuple[tuple[int, int], ...] = (
    (50, 7),
    (110, 24),
    (140, 1),
    (160, 74),
    (220, 62),
    (230, 140),
    (270, 4),
    (290, 1),
    (320, 328),
    (330, 7),
    (350, 6),
    (370, 47),
    (440, 2),
    (460, 128),
    (470, 750),
    (480, 19),
    (550, 72),
    (590, 75),
    (650, 253),
    (810, 1078),
)
ONE_GPU_TASKS = 6989
DEFAULT_SEED = 2023


def fractional_variant(jobs: Sequence[TraceJob], seed: int = DEFAULT_SEED) -> list[TraceJob]:
    """The trace with the rule above applied; the input is not changed."""
    rng = random.Random(seed)
    values = [m for m, _ in ALIBABA_2023_SUB_GPU]
    weights = [n for _, n in ALIBABA_2023_SUB_GPU]
    share = sum(weights) / ONE_GPU_TASKS
    out: list[TraceJob] = []
    for job in jobs:
        if job.gpus == 1 and rng.random() < share:
            milli = rng.choices(values, weights)[0]
            out.append(replace(job, gpu_milli=milli))
        else:
            out.append(job)
    return out
