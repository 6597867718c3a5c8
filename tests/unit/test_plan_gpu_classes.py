"""Which GPUs a job asking for part of a GPU may use, and what it is bought when it bursts.

The rule (docs/slurm.md, "Which GPUs a job may use"): a typed MIG request (`gpu:1g.10gb:1`)
takes only devices of that type; untyped GPUs with a constraint choosing among GPU classes
(`--gres=gpu:1 --constraint="1g.10gb|l4"`) take a device of a profile named, or a whole GPU of a
model named that has the memory of its smallest profile. Among what it may take, the planner
buys what costs least for the jobs waiting: a node's whole price, split over the parts they
would fill. Prices by hand: the p4d-like node is $32/h for 8 80 GB A100s (56 one-slice devices:
$0.5714 each when full), the g6.xlarge $0.805/h for one 24 GB L4, the g4dn.xlarge $0.526/h for
one 16 GB T4.
"""

from __future__ import annotations

from dataclasses import replace

from provisioner.domain.gpu_share import MigDevices, NodeShares, ShareRequest, flexible_share
from provisioner.domain.plan import ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm.parse import parse_job
from provisioner.plan.backoff import Backoff
from provisioner.plan.planner import plan
from tests.unit.helpers import (
    T0,
    burst_node,
    catalog,
    offer,
    onprem_nodes,
    pending,
    policy,
    running,
)

TYPED = ShareRequest("mig", 1, "1g.10gb")
CHOICE = ShareRequest("mig", 1, "1g.10gb", ("l4", "t4"))
# on-prem: 7 devices of 1g.10gb, every one busy for 10 h (and 2 whole GPUs, busy too)
NODE = replace(
    onprem_nodes(1, 2, alloc=2)[0], shares=NodeShares(mig=(MigDevices("1g.10gb", 7, 7),))
)
BUSY = [
    *(replace(running(f"m{k}", 0, "onprem-1", ends_in=36_000), share=TYPED) for k in range(7)),
    *(running(f"w{k}", 1, "onprem-1", ends_in=36_000) for k in range(2)),
]


def _pool(name: str, model: str, **more: object) -> dict[str, object]:
    return {
        "name": name,
        "cloud": "aws",
        "regions": ["us-east-1"],
        "gpu_model": model,
        "max_nodes": 4,
        "boot_seconds": 300,
        "capacity": "on-demand",
        **more,
    }


POOLS = [
    _pool("aws-a100", "A100"),
    _pool("aws-mig", "A100", mig={"profile": "1g.10gb", "per_gpu": 7}),
    _pool("aws-l4", "L4"),
    _pool("aws-t4", "T4"),
]
OFFERS = (
    replace(offer(), gpu_mem_gb=80.0),  # 8 x A100 80 GB, $32/h: room for 7 x 1g.10gb each
    replace(offer(itype="g6.xlarge", gpus=1, od="0.805", model="L4"), gpu_mem_gb=24.0),
    replace(offer(itype="g4dn.xlarge", gpus=1, od="0.526", model="T4"), gpu_mem_gb=16.0),
)


def _plan(*jobs, nodes=(NODE,), pools=POOLS, busy=BUSY):
    snap = ClusterSnapshot(taken_ts=T0, jobs=(*busy, *jobs), nodes=tuple(nodes))
    return plan(snap, policy(pools=pools), catalog(*OFFERS), Backoff(), T0)


def _jobs(n: int, share: ShareRequest):
    return [replace(pending(f"p{k:03d}", 0, 3600.0, submit=T0 + k), share=share) for k in range(n)]


def test_a_lone_job_that_may_take_an_l4_gets_one_not_a_whole_mig_node() -> None:
    result = _plan(*_jobs(1, CHOICE))
    (up,) = result.scale_ups
    # T4 is cheaper still, but the constraint names it too: $0.526 < $0.805 < $32
    assert (up.pool, up.offer.instance_type, up.nodes) == ("aws-t4", "g4dn.xlarge", 1)
    passed_over = {a.offer.instance_type for a in up.decision.alternatives}
    assert {"g6.xlarge", "p4d.24xlarge"} <= passed_over


def test_a_typed_mig_request_never_takes_another_class_however_cheap() -> None:
    result = _plan(*_jobs(1, TYPED))
    (up,) = result.scale_ups
    assert (up.pool, up.offer.instance_type) == ("aws-mig", "p4d.24xlarge")
    assert all(a.offer.instance_type == "p4d.24xlarge" for a in up.decision.alternatives)


def test_a_whole_gpu_job_never_takes_a_smaller_class() -> None:
    result = _plan(pending("w", 1, 3600.0))
    (up,) = result.scale_ups
    assert (up.pool, up.offer.instance_type) == ("aws-a100", "p4d.24xlarge")


def test_a_class_without_the_profiles_memory_is_not_bought() -> None:
    # 2g.20gb needs 20 GB: the 16 GB T4 does not hold it, the 24 GB L4 does
    share = ShareRequest("mig", 1, "2g.20gb", ("l4", "t4"))
    result = _plan(*_jobs(1, share))
    (up,) = result.scale_ups
    assert up.offer.instance_type == "g6.xlarge"
    assert all(a.offer.instance_type != "g4dn.xlarge" for a in up.decision.alternatives)
    # with only the T4 named it waits, and says no pool offers what it may take
    t4_only = _plan(*_jobs(1, ShareRequest("mig", 1, "2g.20gb", ("t4",))))
    assert not t4_only.scale_ups
    (d,) = [d for d in t4_only.decisions if "p000" in d.job_ids]
    assert d.reason is ReasonCode.WAIT_GPU_SHARE
    assert "no pool offers any of 2g.20gb|t4" in d.detail["why"]


def test_many_waiting_jobs_pack_onto_mig_nodes_a_few_take_small_gpus() -> None:
    only_l4 = ShareRequest("mig", 1, "1g.10gb", ("l4",))
    # 100 jobs fill 56 + 44 devices: $32 / 56 = $0.571 a job, and $32 / 44 = $0.727, both
    # below an L4 each ($0.805)
    many = _plan(*_jobs(100, only_l4))
    assert sorted((u.pool, len(u.job_ids)) for u in many.scale_ups) == [
        ("aws-mig", 44),
        ("aws-mig", 56),
    ]
    up = next(u for u in many.scale_ups if len(u.job_ids) == 56)
    assert up.decision.detail["usd_per_device_hour"] == f"{32 / 56:.6f}"
    # 3 jobs would fill 3 devices of a $32 node ($10.67 each): three L4 nodes cost less
    few = _plan(*_jobs(3, only_l4))
    assert sorted(u.offer.instance_type for u in few.scale_ups) == ["g6.xlarge"] * 3


def test_the_last_few_of_a_queue_take_what_they_fill_not_what_the_queue_would() -> None:
    # 60 jobs: 56 fill a MIG node; the 4 left would pay $32 / 4 = $8 each on a second one,
    # so they take an L4 each ($0.805)
    result = _plan(*_jobs(60, ShareRequest("mig", 1, "1g.10gb", ("l4",))))
    assert sorted((u.pool, len(u.job_ids)) for u in result.scale_ups) == [
        *[("aws-l4", 1)] * 4,
        ("aws-mig", 56),
    ]


def test_free_devices_on_a_running_mig_node_come_before_a_new_small_gpu() -> None:
    burst = burst_node("aws-mig-1", "aws-mig", NodeShares(mig=(MigDevices("1g.10gb", 56, 54),)))
    result = _plan(*_jobs(3, CHOICE), nodes=(NODE, burst))
    covered = [d for d in result.decisions if d.reason is ReasonCode.COVERED_BY_INFLIGHT]
    assert sorted(j for d in covered for j in d.job_ids) == ["p000", "p001"]
    (up,) = result.scale_ups
    assert up.job_ids == ("p002",) and up.offer.instance_type == "g4dn.xlarge"


def test_a_job_with_a_choice_starts_on_a_free_on_prem_device_first() -> None:
    free = replace(NODE, shares=NodeShares(mig=(MigDevices("1g.10gb", 7, 6),)))
    result = _plan(*_jobs(1, CHOICE), nodes=(free,), busy=BUSY[1:])
    assert result.predicted_start_ts["p000"] == T0 and not result.scale_ups


def test_a_constraint_choosing_classes_reads_as_parts_of_gpus() -> None:
    assert flexible_share(1, "1g.10gb|t4|L4") == ShareRequest("mig", 1, "1g.10gb", ("L4", "t4"))
    assert flexible_share(1, "L4|t4|1g.10gb").models == ("l4", "t4")  # type: ignore[union-attr]
    assert flexible_share(2, "[2g.20gb|1g.10gb]") == ShareRequest("mig", 2, "1g.10gb", ("2g.20gb",))
    # not a choice of classes, or no MIG profile named: whole GPUs, as before
    for text in ("t4|l4", "1g.10gb&spot", "1g.10gb*2", "", "!1g.10gb"):
        assert flexible_share(1, text) is None, text
    rec = {
        "job_id": 7,
        "job_state": "PENDING",
        "submit_time": T0,
        "tres_per_node": "gres/gpu:1",
        "features": "1g.10gb|t4",
    }
    job = parse_job(rec)
    assert (job.gpus, job.share) == (0, ShareRequest("mig", 1, "1g.10gb", ("t4",)))
    typed = parse_job({**rec, "tres_per_node": "gres/gpu:a100:1"})
    assert (typed.gpus, typed.gpu_type, typed.share) == (1, "a100", None)


# ---- shard pools: GPUs shared by shard count ---------------------------------------------
SHARED = _pool("aws-t4-shared", "T4", shards_per_gpu=4)


def test_shard_jobs_burst_packed_to_a_shard_pool_priced_per_shard() -> None:
    # four jobs of 2 shards: a one-T4 node holds 4 shards, so two nodes of two jobs each
    jobs = _jobs(4, ShareRequest("shard", 2))
    result = _plan(*jobs, pools=[*POOLS, SHARED])
    assert sorted((u.pool, len(u.job_ids)) for u in result.scale_ups) == [
        ("aws-t4-shared", 2),
        ("aws-t4-shared", 2),
    ]
    d = result.scale_ups[0].decision
    assert d.detail["shard_layout"] == "4 shards on each of 1 GPUs"
    assert d.detail["usd_per_device_hour"] == f"{0.526 / 4:.6f}"


def test_a_typed_shard_request_takes_only_its_models_shards() -> None:
    result = _plan(*_jobs(1, ShareRequest("shard", 1, "a100")), pools=[*POOLS, SHARED])
    assert not result.scale_ups
    (d,) = [d for d in result.decisions if "p000" in d.job_ids]
    assert d.reason is ReasonCode.WAIT_GPU_SHARE and "no shard pool offers a100" in d.detail["why"]
    # of the right type it bursts there
    t4 = _plan(*_jobs(1, ShareRequest("shard", 1, "t4")), pools=[*POOLS, SHARED])
    assert [u.pool for u in t4.scale_ups] == ["aws-t4-shared"]


def test_a_whole_gpu_job_never_goes_to_a_shard_pool() -> None:
    t4 = replace(pending("w", 1, 3600.0), gpu_type="t4")
    result = _plan(t4, pools=[POOLS[0], SHARED])
    assert not result.scale_ups
    (d,) = [d for d in result.decisions if "w" in d.job_ids]
    assert d.reason is ReasonCode.BLOCKED_NO_OFFER


def test_free_shards_on_a_running_shard_node_come_first() -> None:
    shares = NodeShares(shards=4, shards_used=1, shards_per_gpu=4)
    burst = burst_node("aws-t4-shared-1", "aws-t4-shared", shares, gpus=1, gpu_type="t4")
    result = _plan(*_jobs(4, ShareRequest("shard", 1)), nodes=(NODE, burst), pools=[SHARED])
    covered = [d for d in result.decisions if d.reason is ReasonCode.COVERED_BY_INFLIGHT]
    assert sorted(j for d in covered for j in d.job_ids) == ["p000", "p001", "p002"]
    (up,) = result.scale_ups
    assert up.job_ids == ("p003",) and up.pool == "aws-t4-shared"
    # 22.05 does not say how many shards are in use: none is counted free
    unknown = replace(burst, shares=NodeShares(shards=4, shards_used=None))
    again = _plan(*_jobs(1, ShareRequest("shard", 1)), nodes=(NODE, unknown), pools=[SHARED])
    assert [u.pool for u in again.scale_ups] == ["aws-t4-shared"]
