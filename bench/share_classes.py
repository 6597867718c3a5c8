"""What plan() buys for jobs that need one 1g.10gb MIG slice, by what their request allows, at
the bundled catalog's AWS us-east-1 on-demand prices (policies/catalog/gpu_offers.csv):

- typed:  `--gres=gpu:1g.10gb:1`, a slice of a MIG pool's node only (8 x A100 80 GB, each GPU
  cut 7 x 1g.10gb: the p4de.24xlarge, 56 slices);
- choice: `--gres=gpu:1 --constraint="1g.10gb|t4|l4|a10g"`, that slice or a whole T4, L4 or
  A10G (each has the 10 GB the profile names);
- whole:  `--gres=gpu:a100:1`, a whole A100: the round-up.

Each queue (1 to 400 such jobs, each expected to run an hour) finds on-prem full for 10 hours, so
every job bursts in one planning pass. Figures: the nodes bought, billed whole ($/h of the
instances, as the cloud bills them), per job, and the instance types; ratios choice/typed and
choice/whole for each queue. A planning check, not a timing: the figures do not depend on the
machine. Last line: one JSON object.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.config.loader import policy_from_mapping  # noqa: E402
from provisioner.domain.gpu_share import MigDevices, NodeShares, ShareRequest  # noqa: E402
from provisioner.domain.jobs import Job, JobState  # noqa: E402
from provisioner.domain.nodes import Node, NodeKind, NodeState  # noqa: E402
from provisioner.domain.snapshot import ClusterSnapshot  # noqa: E402
from provisioner.plan.backoff import Backoff  # noqa: E402
from provisioner.plan.catalog import load_catalog  # noqa: E402
from provisioner.plan.planner import plan  # noqa: E402

T0 = 1_800_000_000.0
QUEUES = (1, 4, 16, 40, 56, 112, 400)
MODES = {
    "typed": ShareRequest("mig", 1, "1g.10gb"),
    "choice": ShareRequest("mig", 1, "1g.10gb", ("a10g", "l4", "t4")),
    "whole": None,
}


def _pool(name: str, model: str, **more: object) -> dict[str, object]:
    base = {"name": name, "cloud": "aws", "regions": ["us-east-1"], "gpu_model": model}
    return {**base, "capacity": "on-demand", "max_nodes": 500, "boot_seconds": 300, **more}


POLICY = policy_from_mapping(
    {
        "onprem": {"gpu_model": "A100", "gpus_per_node": 8},
        "waiting": {"default": {"runtime_factor": 0.5, "per_gpu_s": 600, "cap_s": 86400}},
        "pools": [
            _pool("aws-a100", "A100"),
            _pool(
                "aws-mig",
                "A100",
                instance_types=["p4de.24xlarge"],
                mig={"profile": "1g.10gb", "per_gpu": 7},
            ),
            _pool("aws-t4", "T4"),
            _pool("aws-l4", "L4"),
            _pool("aws-a10g", "A10G"),
        ],
        "guardrails": {"require_nvml_idle": False, "max_scale_up_nodes_per_pass": 1000},
    },
    "bench/share_classes.py",
)


def _snapshot(jobs: list[Job]) -> ClusterSnapshot:
    """One on-prem node, its 8 GPUs and 7 slices all held for 10 hours."""
    node = Node(
        name="onprem-1",
        kind=NodeKind.ONPREM,
        gpus=8,
        gpus_alloc=8,
        gpu_type="a100",
        state=NodeState.ALLOCATED,
        shares=NodeShares(mig=(MigDevices("1g.10gb", 7, 7),)),
    )
    busy = [
        Job(f"r{k}", 1 if k < 8 else 0, T0 - 100, state=JobState.RUNNING, start_ts=T0 - 100,
            nodes=("onprem-1",), expected_runtime_s=36_100.0,
            share=None if k < 8 else ShareRequest("mig", 1, "1g.10gb"))
        for k in range(15)
    ]  # fmt: skip
    return ClusterSnapshot(taken_ts=T0, jobs=(*busy, *jobs), nodes=(node,))


@dataclass(frozen=True)
class Bought:
    usd_per_hour: float
    placed: int
    nodes: dict[str, int]

    def row(self, n: int) -> dict[str, object]:
        return {"usd_per_hour": self.usd_per_hour, "per_job": self.usd_per_hour / n,
                "placed": self.placed, "nodes": self.nodes}  # fmt: skip


def bought(n: int, share: ShareRequest | None) -> Bought:
    jobs = [
        Job(f"p{k:03d}", 0 if share else 1, T0 + k, expected_runtime_s=3600.0, share=share,
            gpu_type="" if share else "a100")
        for k in range(n)
    ]  # fmt: skip
    result = plan(_snapshot(jobs), POLICY, load_catalog(), Backoff(), T0)
    usd = sum((u.usd_per_hour_per_node * u.nodes for u in result.scale_ups), Decimal(0))
    kinds = Counter(u.offer.instance_type for u in result.scale_ups for _ in range(u.nodes))
    placed = sum(len(u.job_ids) for u in result.scale_ups)
    return Bought(float(usd), placed, dict(sorted(kinds.items())))


def main() -> None:
    rows: dict[str, dict[str, object]] = {}
    print(f"{'jobs':>5} {'mode':>7} {'$/h':>9} {'$/job-h':>8}  nodes bought")
    for n in QUEUES:
        got = {mode: bought(n, share) for mode, share in MODES.items()}
        for mode, b in got.items():
            assert b.placed == n, (n, mode, b)
            nodes = ", ".join(f"{c} x {t}" for t, c in b.nodes.items())
            print(f"{n:>5} {mode:>7} {b.usd_per_hour:>9.3f} {b.usd_per_hour / n:>8.4f}  {nodes}")
        row: dict[str, object] = {mode: b.row(n) for mode, b in got.items()}
        typed, choice, whole = (got[m].usd_per_hour for m in ("typed", "choice", "whole"))
        row["choice_over_typed"] = round(choice / typed, 4)
        row["choice_over_whole"] = round(choice / whole, 4)
        print(f"{n:>5}: choice/typed {choice / typed:.3f}x, choice/whole {choice / whole:.3f}x")
        rows[str(n)] = row
    print(json.dumps({"queues": rows}))


if __name__ == "__main__":
    main()
