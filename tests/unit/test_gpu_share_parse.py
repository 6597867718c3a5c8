"""Parts of GPUs as Slurm wrote them on the project's clusters (22.05 and 24.11, MIG-typed GPU
GRES and shards on fake device files: docs/slurm.md), parsed into requests and node capacity."""

from __future__ import annotations

import pytest

from provisioner.domain.gpu_share import MigDevices, ShareRequest
from provisioner.observe.slurm.gpu_shares import node_shares, split_tres
from provisioner.observe.slurm.parse import parse_job, parse_scontrol_nodes


@pytest.mark.parametrize(
    ("spec", "whole", "share"),
    [
        ("gres:gpu:1g.10gb:2", 0, ShareRequest("mig", 2, "1g.10gb")),  # 22.05 tres_per_node
        ("gres/gpu:1g.10gb:2", 0, ShareRequest("mig", 2, "1g.10gb")),  # 24.11
        ("gres:shard:3", 0, ShareRequest("shard", 3)),
        ("gres/shard:3", 0, ShareRequest("shard", 3)),
        ("gres/shard:a100:3", 0, ShareRequest("shard", 3, "a100")),
        (
            "gres/gpu=2,gres/gpu:nvidia_a100_3g.40gb=2",
            0,
            ShareRequest("mig", 2, "nvidia_a100_3g.40gb"),
        ),
        ("gres/gpu=3,gres/gpu:a100=1,gres/gpu:1g.10gb=2", 1, ShareRequest("mig", 2, "1g.10gb")),
        ("gres/gpu=2,gres/gpu:a100=2", 2, None),
        ("cpu=1,mem=1000M,node=1,billing=1", 0, None),
    ],
)
def test_a_request_splits_into_whole_gpus_and_parts(
    spec: str, whole: int, share: ShareRequest | None
) -> None:
    got_whole, _, got_share = split_tres(spec)
    assert (got_whole, got_share) == (whole, share)


def _job(tres_per_node: str, node_count: int = 1) -> dict[str, object]:
    return {
        "job_id": 5,
        "job_state": "PENDING",
        "submit_time": 1_700_000_000,
        "partition": "onprem",
        "tres_per_node": tres_per_node,
        "tres_req_str": f"cpu={node_count},mem=2000M,node={node_count},billing=2",
        "node_count": node_count,
    }


def test_a_mig_job_asks_for_no_whole_gpu_and_counts_its_devices_on_every_node() -> None:
    job = parse_job(_job("gres:gpu:1g.10gb:1", node_count=2))  # sbatch -N2 --gres=gpu:1g.10gb:1
    assert job.gpus == 0 and job.gpu_type == ""
    assert job.share == ShareRequest("mig", 2, "1g.10gb")
    assert job.share.profile is not None and job.share.profile.slices == 1
    assert job.share.label == "gpu:1g.10gb:2"


def test_a_shard_job_is_a_part_of_a_gpu() -> None:
    job = parse_job(_job("gres/shard:2"))
    assert job.gpus == 0 and job.share == ShareRequest("shard", 2)
    assert parse_job(_job("gres/gpu:a100:2")).share is None


NODE_24_11 = (
    "NodeName=onprem-1 CPUTot=2 Gres=gpu:a100:2,gpu:1g.10gb:7,shard:a100:8,shard:1g.10gb:0 "
    "GresUsed=gpu:a100:0(IDX:N/A),gpu:1g.10gb:2(IDX:2-3),shard:a100:3(3/4,0/4),"
    "shard:1g.10gb:0(0/0,0/0,0/0,0/0,0/0,0/0,0/0) NodeAddr=127.0.0.1 State=MIXED Weight=1 "
    "Partitions=onprem ActiveFeatures=onprem"
)


def test_a_mig_node_counts_whole_gpus_apart_from_its_devices_and_shards() -> None:
    (node,) = parse_scontrol_nodes(NODE_24_11)
    assert node.gpus == 2 and node.gpus_alloc == 0 and node.gpu_type == "a100"
    assert node.shares is not None
    assert node.shares.mig == (MigDevices("1g.10gb", 7, 2),)
    assert node.shares.mig_free == {"1g.10gb": 5}
    assert (node.shares.shards, node.shares.shards_used, node.shares.shards_per_gpu) == (8, 3, 4)
    # 7 one-slice devices fill one physical GPU: three GPUs in the box
    assert node.shares.mig_gpus == 1 and node.physical_gpus == 3


def test_22_05_counts_gpus_with_shards_in_use_not_shards() -> None:
    shares = node_shares(
        "gpu:a100:2,gpu:1g.10gb:7,shard:a100:8,shard:1g.10gb:0",
        "gpu:a100:0(IDX:N/A),gpu:1g.10gb:2(IDX:2-3),shard:a100:1(IDX:0),shard:1g.10gb:0(IDX:N/A)",
    )
    assert shares is not None and shares.shards == 8 and shares.shards_used is None


def test_a_node_without_parts_of_gpus_has_no_shares() -> None:
    assert node_shares("gpu:a100:4", "gpu:a100:2(IDX:0-1)") is None
    mixed = node_shares("gpu:a100:1,gpu:3g.40gb:2,gpu:4g.40gb:1", "")
    assert mixed is not None and mixed.mig_gpus == 2  # 3 + 3 + 4 = 10 slices: two GPUs
