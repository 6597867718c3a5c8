"""The planner and jobs asking only for parts of GPUs (MIG devices, shards): they wait for the
on-prem ones in queue order, buy nothing, and hold no whole GPU. Times by hand from T0."""

from __future__ import annotations

from dataclasses import replace

from provisioner.domain.gpu_share import MigDevices, NodeShares, ShareRequest
from provisioner.domain.plan import ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.plan.planner import plan
from tests.unit.helpers import T0, catalog, onprem_nodes, pending, policy, running

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
    assert result.predicted_start_ts["p1"] == T0 + 1000 and result.predicted_start_ts["p2"] == T0 + 2200


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
