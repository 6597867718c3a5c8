"""Issue 32: a shard pool's nodes share each GPU as Slurm shards. The policy refuses a pool cut
both ways, and the nodes declare their GPUs, their shards and their class to Slurm."""

from __future__ import annotations

import pytest

from provisioner.config.loader import policy_from_mapping
from provisioner.domain.errors import ConfigError
from provisioner.register.slurm_conf import BurstNodeSet, render_gres_conf, render_slurm_conf

POOL = {"name": "aws-t4-shared", "cloud": "aws", "regions": ["us-east-1"], "gpu_model": "T4"}


def test_a_pool_is_either_mig_or_shared() -> None:
    ok = policy_from_mapping(
        {"onprem": {"gpu_model": "A100"}, "pools": [{**POOL, "shards_per_gpu": 4}]}, "t"
    )
    assert ok.pools[0].shards_per_gpu == 4
    both = {**POOL, "shards_per_gpu": 4, "mig": {"profile": "1g.10gb", "per_gpu": 7}}
    with pytest.raises(ConfigError, match="mig and shards_per_gpu both set"):
        policy_from_mapping({"onprem": {"gpu_model": "A100"}, "pools": [both]}, "t")
    with pytest.raises(ConfigError, match="shards_per_gpu"):
        policy_from_mapping(
            {"onprem": {"gpu_model": "A100"}, "pools": [{**POOL, "shards_per_gpu": 0}]}, "t"
        )


def test_a_shard_pools_nodes_declare_gpus_and_shards_over_the_same_devices() -> None:
    s = BurstNodeSet("aws-t4-shared", "aws", "us-east-1", "ondemand", 2, 4, "t4", 48, 190_000,
                     shards_per_gpu=4)  # fmt: skip
    conf = render_slurm_conf([s])
    assert (
        "NodeName=aws-t4-shared-[1-2] CPUs=48 RealMemory=190000 Gres=gpu:t4:4,shard:16 "
        "Feature=cloud,aws,us-east-1,ondemand,t4 Weight=100 State=CLOUD"
    ) in conf
    assert render_gres_conf([s]).splitlines() == [
        "NodeName=aws-t4-shared-[1-2] Name=gpu Type=t4 File=/dev/nvidia[0-3]",
        "NodeName=aws-t4-shared-[1-2] Name=shard Count=16 File=/dev/nvidia[0-3]",
    ]
