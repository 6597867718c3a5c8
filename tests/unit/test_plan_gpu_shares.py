"""The planner and jobs asking only for parts of GPUs (MIG devices, shards): they wait for the
on-prem ones in queue order, buy nothing, and hold no whole GPU. Times by hand from T0."""

from __future__ import annotations

from dataclasses import replace

from provisioner.domain.gpu_share import MigDevices, NodeShares, ShareRequest
from provisioner.domain.plan import ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
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

MIG = ShareRequest("mig", 1, "1g.10gb")
# one on-prem node: 2 whole GPUs, 7 devices of 1g.10gb, 8 shards
NODE = replace(
    onprem_nodes(1, 2)[0],
    shares=NodeShares(mig=(MigDevices("1g.10gb", 7, 7),), shards=8, shards_used=0),
)


def _plan(*jobs):
    snap = ClusterSnapshot(taken_ts=T0, jobs=tuple(jobs), nodes=(NODE,))
    return plan(snap, policy(), catalog(), Backoff(), T0)


def _slices_busy(ends_in: float):
    """Seven running one-device jobs, ending 600 s apart from `ends_in` on."""
    return [
        replace(running(f"m{k}", 0, "onprem-1", ends_in=ends_in + 600 * k), share=MIG)
        for k in range(7)
    ]


def test_a_mig_job_waits_for_the_first_device_to_free_and_buys_nothing() -> None:
    result = _plan(*_slices_busy(1000), replace(pending("p1", 0, 3600.0), share=MIG))
    assert not result.scale_ups
    (d,) = [d for d in result.decisions if "p1" in d.job_ids]
    assert d.reason is ReasonCode.WAIT_GPU_SHARE and d.detail["share"] == "gpu:1g.10gb:1"
    assert d.predicted_wait_s == 1000
    assert result.predicted_start_ts["p1"] == T0 + 1000


def test_queue_order_gives_later_mig_jobs_later_devices() -> None:
    two = replace(pending("p2", 0, 3600.0, submit=T0 + 1), share=replace(MIG, count=2))
    result = _plan(*_slices_busy(1000), replace(pending("p1", 0, 3600.0), share=MIG), two)
    # p1 takes the device freed at +1000; p2 needs two, free at +1600 and +2200
    assert (
        result.predicted_start_ts["p1"] == T0 + 1000
        and result.predicted_start_ts["p2"] == T0 + 2200
    )


def test_a_share_no_on_prem_node_offers_is_named_and_buys_nothing() -> None:
    other = ShareRequest("mig", 1, "3g.40gb")
    result = _plan(replace(pending("p1", 0, 3600.0), share=other))
    (d,) = [d for d in result.decisions if "p1" in d.job_ids]
    assert d.reason is ReasonCode.WAIT_GPU_SHARE
    assert "offer 0 of the 1" in d.detail["why"] and not result.scale_ups


def test_shards_start_at_once_while_free() -> None:
    job = replace(pending("p1", 0, 3600.0), share=ShareRequest("shard", 3))
    result = _plan(job)
    assert result.predicted_start_ts["p1"] == T0
    assert not [d for d in result.decisions if "p1" in d.job_ids]


def test_running_share_jobs_hold_no_whole_gpu() -> None:
    # every device busy, but the 2 whole GPUs are free: a 2-GPU job starts at once
    result = _plan(*_slices_busy(1000), pending("w", 2, 3600.0))
    assert result.predicted_start_ts["w"] == T0 and not result.scale_ups


# ---- bursting parts of GPUs to a MIG pool ------------------------------------------------
# Pools: aws-a100 (whole GPUs) and aws-mig (every GPU cut into 7 x 1g.10gb: 56 devices a node).
# The catalog: an 8 x A100 80 GB node only, $32/h on demand: $0.5714 a device-hour.
MIG_POOL = {
    "name": "aws-mig",
    "cloud": "aws",
    "regions": ["us-east-1"],
    "gpu_model": "A100",
    "max_nodes": 2,
    "boot_seconds": 300,
    "capacity": "on-demand",
    "mig": {"profile": "1g.10gb", "per_gpu": 7},
}


# 7 x 1g.10gb on each GPU needs 70 GB of it: an 80 GB A100 (a 40 GB one is never bought)
A100_80GB = replace(offer(), gpu_mem_gb=80.0)


def _mig_policy():
    base = policy()
    pools = [p.model_dump(mode="json") for p in base.pools] + [MIG_POOL]
    return policy(pools=pools)


def _plan_mig(*jobs, nodes=(NODE,)):
    snap = ClusterSnapshot(taken_ts=T0, jobs=tuple(jobs), nodes=tuple(nodes))
    return plan(snap, _mig_policy(), catalog(A100_80GB), Backoff(), T0)


def test_mig_jobs_past_their_budget_burst_packed_on_one_mig_node() -> None:
    # on-prem devices all busy for 10 h: 30 one-device jobs cannot wait that long
    jobs = [replace(pending(f"p{k:02d}", 0, 3600.0, submit=T0 + k), share=MIG) for k in range(30)]
    result = _plan_mig(*_slices_busy(36_000), *jobs)
    (up,) = result.scale_ups
    assert up.pool == "aws-mig" and up.nodes == 1 and len(up.job_ids) == 30
    d = up.decision
    assert d.reason is ReasonCode.BURST_WAIT_EXCEEDS_BUDGET
    assert d.detail["devices_per_node"] == "56"
    assert d.detail["mig_layout"] == "7 x 1g.10gb on each of 8 GPUs"
    assert d.detail["usd_per_device_hour"] == f"{32 / 56:.6f}"  # the node's price, split


def test_more_devices_than_a_node_holds_open_a_second_node() -> None:
    jobs = [
        replace(pending(f"p{k:02d}", 0, 3600.0, submit=T0 + k), share=replace(MIG, count=3))
        for k in range(20)
    ]  # 60 devices: 18 jobs (54) fill the first node, 2 go to a second
    result = _plan_mig(*_slices_busy(36_000), *jobs)
    assert sorted(len(u.job_ids) for u in result.scale_ups) == [2, 18]
    assert {u.pool for u in result.scale_ups} == {"aws-mig"}


def test_whole_gpu_jobs_never_burst_to_a_mig_pool() -> None:
    # the on-prem node's 2 GPUs are busy for 10 h; a 1-GPU job bursts to the whole-GPU pool
    busy = [running(f"w{k}", 1, "onprem-1", ends_in=36_000) for k in range(2)]
    result = _plan_mig(*busy, pending("w", 1, 3600.0))
    (up,) = result.scale_ups
    assert up.pool == "aws-a100"


def test_a_mig_job_whose_type_no_pool_offers_waits_and_buys_nothing() -> None:
    other = ShareRequest("mig", 1, "3g.40gb")
    result = _plan_mig(*_slices_busy(36_000), replace(pending("p1", 0, 3600.0), share=other))
    assert not result.scale_ups
    (d,) = [d for d in result.decisions if "p1" in d.job_ids]
    assert d.reason is ReasonCode.WAIT_GPU_SHARE and "no MIG pool offers 3g.40gb" in d.detail["why"]


def test_a_mig_job_soon_startable_on_prem_stays() -> None:
    # a device frees in 1000 s; the job's budget for an hour's run is longer than that
    result = _plan_mig(*_slices_busy(1000), replace(pending("p1", 0, 3600.0), share=MIG))
    assert not result.scale_ups
    assert result.predicted_start_ts["p1"] == T0 + 1000


def test_free_devices_on_a_running_mig_node_are_used_before_buying() -> None:
    burst = burst_node("aws-mig-1", "aws-mig", NodeShares(mig=(MigDevices("1g.10gb", 56, 50),)))
    jobs = [replace(pending(f"p{k}", 0, 3600.0, submit=T0 + k), share=MIG) for k in range(8)]
    result = _plan_mig(*_slices_busy(36_000), *jobs, nodes=(NODE, burst))
    covered = [d for d in result.decisions if d.reason is ReasonCode.COVERED_BY_INFLIGHT]
    assert sum(len(d.job_ids) for d in covered) == 6  # the node's 6 free devices
    (up,) = result.scale_ups
    assert len(up.job_ids) == 2 and up.pool == "aws-mig"


def test_a_node_whose_gpus_lack_the_layouts_memory_is_never_bought() -> None:
    jobs = [replace(pending(f"p{k}", 0, 3600.0, submit=T0 + k), share=MIG) for k in range(3)]
    snap = ClusterSnapshot(taken_ts=T0, jobs=(*_slices_busy(36_000), *jobs), nodes=(NODE,))
    result = plan(snap, _mig_policy(), catalog(offer()), Backoff(), T0)  # 40 GB A100s
    assert not result.scale_ups
    assert {d.reason for d in result.decisions if "p0" in d.job_ids} == {ReasonCode.WAIT_GPU_SHARE}
