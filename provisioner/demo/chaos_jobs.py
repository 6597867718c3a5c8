"""Jobs the chaos soak adds beside the Philly trace's: jobs asking only for MIG devices."""

from __future__ import annotations

import random

from provisioner.demo.fake_slurm import FakeSlurm
from provisioner.domain.gpu_share import ShareRequest

MIG_TYPE = "1g.10gb"  # the on-prem node's MIG devices, and what the share jobs ask for


def submit_share_jobs(fake: FakeSlurm, seed: int, t0: float, within_s: float, n: int) -> int:
    """`n` jobs of 1-3 MIG devices, 5-15 min each, arriving in [t0, t0 + within_s), drawn from
    a stream of their own (a seed's other draws stay as they were). They run on-prem only."""
    rng = random.Random(f"shares-{seed}")
    for k in range(n):
        fake.submit(
            0,
            rng.uniform(300.0, 900.0),
            submit_ts=t0 + rng.uniform(0.0, within_s),
            partition="onprem",
            account="acct-s",
            user=f"s{k}",
            time_limit_s=2400.0,
            share=ShareRequest("mig", rng.randint(1, 3), MIG_TYPE),
        )
    return n
