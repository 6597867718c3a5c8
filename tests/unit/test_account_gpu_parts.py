"""Issue 32, money: clouds bill whole instances and so do we. A burst node's bill is split over
the GPUs its jobs hold, parts of GPUs at their share of a GPU (a one-slice MIG device is 1/7 of
a GPU), and the rest is idle, charged to the pool; on-prem amortisation likewise. Values by
hand."""

from __future__ import annotations

from decimal import Decimal

import pytest

from provisioner.account.allocation import (
    allocate_energy,
    allocate_instance_window,
    allocate_onprem,
)
from provisioner.domain.gpu_share import MigDevices, NodeShares, ShareRequest
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.records import JobUsage, LedgerKind, StoredInstance
from provisioner.observe.slurm.usage import UsageTracker

T0 = 1_800_000_000.0
NODE = StoredInstance(
    CloudInstance(
        "i-1",
        "gcp-a100",
        OfferKey("gcp", "us-central1", "a2-highgpu-8g", CapacityType.ON_DEMAND),
        "A100",
        8,
        Decimal("56"),
        InstanceState.READY,
        T0 - 600,
        node_name="cloud-1",
    )
)


def usage(job: str, gpus: int = 0, part: float = 0.0, gpu_part: str = "") -> JobUsage:
    return JobUsage(job, "cloud-1", gpus, T0, T0 + 3600, part_gpus=part, gpu_part=gpu_part)


def test_a_slice_pays_its_part_of_the_whole_node_and_the_rest_is_idle() -> None:
    # $56/h for 8 GPUs: $7 a GPU-hour. One 1g slice (1/7 GPU) for the hour: $1; a whole GPU: $7
    rows = allocate_instance_window(
        NODE, T0, T0 + 3600, [usage("mig", part=1 / 7), usage("whole", gpus=1)]
    )
    by_job = {r.job_id: r for r in rows if r.kind is LedgerKind.JOB}
    assert by_job["mig"].cost == Decimal("1.000000")
    assert by_job["whole"].cost == Decimal("7.000000")
    assert by_job["mig"].quantity == pytest.approx(1 / 7)
    (idle,) = [r for r in rows if r.kind is not LedgerKind.JOB]
    assert idle.cost == Decimal("48.000000") and idle.pool == "gcp-a100"
    assert sum(r.cost for r in rows) == Decimal("56.000000")  # the whole instance, billed


def test_a_jobs_rows_name_the_part_of_a_gpu_it_held_and_idle_rows_none() -> None:
    rows = allocate_instance_window(
        NODE,
        T0,
        T0 + 3600,
        [usage("mig", part=1 / 7, gpu_part="1g.10gb"), usage("whole", gpus=1)],
    )
    assert {(r.job_id, r.kind, r.gpu_part, r.cost) for r in rows} == {
        ("mig", LedgerKind.JOB, "1g.10gb", Decimal("1.000000")),
        ("whole", LedgerKind.JOB, "", Decimal("7.000000")),
        ("", LedgerKind.IDLE, "", Decimal("48.000000")),
    }


def test_on_prem_and_energy_rows_name_the_part_too() -> None:
    # 3 shards of a GPU split in 4 at $1.20 a GPU-hour for an hour: $0.90
    u = JobUsage("s", "gpu-01", 0, T0, T0 + 3600, part_gpus=3 / 4, gpu_part="shard")
    row = allocate_onprem(u, T0, T0 + 3600, Decimal("1.20"))
    assert row is not None and row.cost == Decimal("0.900000") and row.gpu_part == "shard"
    # 1 kWh at $0.40 over a 1-GPU node: the job's 3/4 of it $0.30, the rest $0.10 no job's
    rows = allocate_energy("gpu-01", T0, T0 + 3600, Decimal(1), Decimal("0.40"), [u], node_gpus=1)
    assert {(r.job_id, r.gpu_part, r.cost) for r in rows} == {
        ("s", "shard", Decimal("0.300000")),
        ("", "", Decimal("0.100000")),
    }


def test_seven_slices_cost_what_one_gpu_costs() -> None:
    rows = allocate_instance_window(
        NODE, T0, T0 + 3600, [usage(f"m{k}", part=1 / 7) for k in range(7)]
    )
    jobs = [r for r in rows if r.kind is LedgerKind.JOB]
    assert sum(r.cost for r in jobs) == Decimal("7.000000")
    assert {r.cost for r in jobs} == {Decimal("1.000000")}


def test_on_prem_amortisation_charges_a_slice_its_part() -> None:
    # $2.10 a GPU-hour; a 3g slice (3/7 GPU) for an hour: $0.90
    u = JobUsage("j", "gpu-01", 0, T0, T0 + 3600, part_gpus=3 / 7)
    row = allocate_onprem(u, T0, T0 + 3600, Decimal("2.10"))
    assert row is not None and row.cost == Decimal("0.900000")
    assert allocate_onprem(JobUsage("k", "gpu-01", 0, T0, T0 + 3600), T0, T0 + 3600,
                           Decimal("2.10")) is None  # fmt: skip


@pytest.mark.parametrize(
    ("share", "shares", "part", "name"),
    [
        (
            ShareRequest("mig", 2, "1g.10gb"),
            NodeShares(mig=(MigDevices("1g.10gb", 7),)),
            2 / 7,
            "1g.10gb",
        ),
        (ShareRequest("mig", 1, "nvidia_a100_3g.40gb"), None, 3 / 7, "nvidia_a100_3g.40gb"),
        # 24.11 says 4 shards a GPU; 22.05 does not, and 8 shards over 2 GPUs is 4 too
        (ShareRequest("shard", 3), NodeShares(shards=8, shards_per_gpu=4), 3 / 4, "shard"),
        (ShareRequest("shard", 3, "a100"), NodeShares(shards=8, shards_used=None), 3 / 4, "shard"),
        (ShareRequest("shard", 3), None, 0.0, "shard"),  # a node whose shards are not known
        (None, None, 0.0, ""),  # whole GPUs only
        # a choice of classes (`--constraint=1g.10gb|t4`): a device where the node has them,
        # else a whole GPU of the node, billed and reported as one
        (
            ShareRequest("mig", 1, "1g.10gb", ("t4",)),
            NodeShares(mig=(MigDevices("1g.10gb", 7),)),
            1 / 7,
            "1g.10gb",
        ),
        (ShareRequest("mig", 1, "1g.10gb", ("t4",)), None, 1.0, ""),
    ],
)
def test_usage_records_carry_the_parts_of_gpus_a_job_holds(share, shares, part, name) -> None:
    node = Node("gpu-01", NodeKind.ONPREM, 2, 0, state=NodeState.MIXED, shares=shares)
    job = Job("7", 0, T0 - 60, nodes=("gpu-01",), state=JobState.RUNNING, start_ts=T0,
              share=share)  # fmt: skip
    tracker = UsageTracker()
    tracker.update([job], T0 + 10, [node])
    (rec,) = tracker.open_records
    assert rec.gpus == 0 and rec.part_gpus == pytest.approx(part)
    assert rec.gpu_part == name
    assert rec.gpu_seconds(T0 + 3600) == pytest.approx(3600 * part)
