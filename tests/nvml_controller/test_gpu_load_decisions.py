"""The controller's decisions with NVML load: scale-down needs NVML-confirmed idleness, stale
telemetry counts as none, and `health.allocated_idle_counts_busy` shapes wait predictions."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
from nvml_ctl_helpers import T0, make_policy

from provisioner.config.models import Guardrails, Health
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.nodes import GpuSample, Node, NodeKind, NodeState
from provisioner.domain.offers import Offer
from provisioner.domain.plan import Drain, ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.plan.catalog import Catalog
from provisioner.plan.gpu_view import allocated_idle_gpus, attach_gpu_load, planning_view
from provisioner.plan.planner import plan
from provisioner.reconcile.snapshot_view import gpu_load_from_store

pytestmark = pytest.mark.nvml

CATALOG = Catalog(
    (
        Offer(
            cloud="aws",
            region="us-east-1",
            instance_type="p4d.24xlarge",
            gpu_model="A100",
            gpus_per_node=8,
            gpu_mem_gb=40.0,
            vcpus=96,
            mem_gb=1152.0,
            ondemand_usd_hr=Decimal("32"),
            spot_usd_hr=Decimal("8"),
            spot_interruption_pct_max=5,
        ),
    )
)


def sample(index: int, util: float, ts: float = T0 - 10, mem: float = 0.0) -> GpuSample:
    return GpuSample(
        index=index, uuid=f"GPU-{index}", util_pct=util, mem_used_mib=mem, sampled_ts=ts
    )


def burst_node(name: str = "cloud-1", idle_for: float = 1200.0) -> Node:
    """A burst node Slurm reports idle (no GPU allocated) for `idle_for` seconds."""
    return Node(
        name,
        NodeKind.BURST,
        8,
        0,
        gpu_type="a100",
        state=NodeState.IDLE,
        pool="aws-a100",
        instance_id="i-1",
        idle_since_ts=T0 - idle_for,
    )


def snap(*nodes: Node, jobs: tuple[Job, ...] = ()) -> ClusterSnapshot:
    return ClusterSnapshot(taken_ts=T0, nodes=nodes, jobs=jobs)


def decide(s: ClusterSnapshot, **policy_over: object):
    return plan(s, make_policy(**policy_over), CATALOG, Backoff(), T0)


def scale_down(p) -> list:
    return [
        d for d in p.decisions if d.reason in (ReasonCode.KEEP_GPU_BUSY, ReasonCode.SCALE_DOWN_IDLE)
    ]


# --------------------------------------------------------------------------- scale-down


def test_slurm_idle_but_nvml_busy_keeps_the_burst_node(store):
    store.upsert_telemetry("cloud-1", [sample(0, 0.0), sample(1, 87.0)], T0 - 9)
    s = attach_gpu_load(snap(burst_node()), gpu_load_from_store(store, T0))
    p = decide(s)
    assert not [a for a in p.actions if isinstance(a, Drain)]
    (d,) = scale_down(p)
    assert d.reason is ReasonCode.KEEP_GPU_BUSY
    assert (d.node, d.detail) == ("cloud-1", {"why": "NVML shows GPU load"})


def test_slurm_idle_and_nvml_idle_drains_the_burst_node(store):
    store.upsert_telemetry("cloud-1", [sample(i, 0.5) for i in range(8)], T0 - 9)
    s = attach_gpu_load(snap(burst_node()), gpu_load_from_store(store, T0))
    p = decide(s)
    (drain,) = [a for a in p.actions if isinstance(a, Drain)]
    assert (drain.node, drain.instance_id) == ("cloud-1", "i-1")
    assert drain.decision.reason is ReasonCode.SCALE_DOWN_IDLE


def test_nvml_idle_does_not_drain_before_the_slurm_idle_timeout(store):
    store.upsert_telemetry("cloud-1", [sample(0, 0.0)], T0 - 9)
    s = attach_gpu_load(snap(burst_node(idle_for=60)), gpu_load_from_store(store, T0))
    assert not decide(s).actions


def test_stale_telemetry_counts_as_no_sample(store):
    # Idle an hour ago says nothing about now: the node is kept while NVML idleness is required.
    store.upsert_telemetry("cloud-1", [sample(i, 0.0, ts=T0 - 3600) for i in range(8)], T0 - 3600)
    loads = gpu_load_from_store(store, T0, max_age_s=60)
    assert loads == {}
    s = attach_gpu_load(snap(burst_node()), loads)
    (d,) = scale_down(decide(s))
    assert (d.reason, d.detail["why"]) == (ReasonCode.KEEP_GPU_BUSY, "no NVML sample")
    relaxed = decide(s, guardrails=Guardrails(idle_timeout_s=600, require_nvml_idle=False))
    assert [type(a) for a in relaxed.actions] == [Drain]


def test_api_push_feeds_the_scale_down_decision(store):
    """The whole path: agent payload -> POST /v1/telemetry -> store -> snapshot -> planner."""
    from nvml_ctl_helpers import gpu, make_env, telemetry

    env = make_env(store, make_policy())
    env.push(telemetry("cloud-1", T0 - 5, [gpu(0, 0.0), gpu(1, 64.0)]))
    s = attach_gpu_load(snap(burst_node()), gpu_load_from_store(store, T0))
    assert [g.util_pct for g in s.nodes[0].gpu_load] == [0.0, 64.0]
    assert scale_down(decide(s))[0].reason is ReasonCode.KEEP_GPU_BUSY
    env.push(telemetry("cloud-1", T0 - 1, [gpu(0, 0.0), gpu(1, 1.0)]))
    s = attach_gpu_load(snap(burst_node()), gpu_load_from_store(store, T0))
    assert scale_down(decide(s))[0].reason is ReasonCode.SCALE_DOWN_IDLE


# --------------------------------------------------------------------------- freshness


def test_gpu_load_from_store_keeps_only_fresh_gpus(store):
    store.upsert_telemetry("a", [sample(1, 50.0), sample(0, 10.0)], T0 - 5)
    store.upsert_telemetry("b", [sample(0, 1.0, ts=T0 - 500), sample(1, 2.0)], T0 - 5)
    store.upsert_telemetry("future", [sample(0, 1.0, ts=T0 + 3600)], T0 - 5)
    store.upsert_telemetry("silent", [sample(0, 1.0)], T0 - 500)  # agent not heard from since
    loads = gpu_load_from_store(store, T0, max_age_s=60)
    assert sorted(loads) == ["a", "b"]
    assert [g.index for g in loads["a"]] == [0, 1]
    assert [g.index for g in loads["b"]] == [1]
    with pytest.raises(ValueError):
        gpu_load_from_store(store, T0, max_age_s=-1)


def test_attach_gpu_load_returns_a_new_snapshot_and_never_mutates():
    old = (sample(0, 99.0),)
    n1 = replace(burst_node("n1"), gpu_load=old)
    n2 = burst_node("n2")
    s = snap(n1, n2)
    new_load = (sample(0, 1.0),)
    out = attach_gpu_load(s, {"n2": new_load})
    assert out is not s
    assert s.nodes[0].gpu_load == old and s.nodes[1].gpu_load == ()
    assert out.nodes[0].gpu_load == ()  # not in the loads: nothing old carried over
    assert out.nodes[1].gpu_load == new_load


# --------------------------------------------------------------------------- wait predictions


def onprem(alloc: int, utils: tuple[float, ...], mem: float = 0.0) -> Node:
    return Node(
        "gpu-01",
        NodeKind.ONPREM,
        4,
        alloc,
        gpu_type="a100",
        state=NodeState.ALLOCATED if alloc == 4 else NodeState.MIXED,
        gpu_load=tuple(sample(i, u, mem=mem) for i, u in enumerate(utils)),
    )


def run_job(job_id: str, gpus: int, nodes: tuple[str, ...], ends_in: float) -> Job:
    return Job(
        job_id,
        gpus,
        T0 - 100,
        partition="onprem",
        state=JobState.RUNNING,
        start_ts=T0 - 100,
        expected_runtime_s=100 + ends_in,
        nodes=nodes,
    )


def test_allocated_idle_count_assumes_free_gpus_are_the_idle_ones():
    assert allocated_idle_gpus(onprem(4, (0, 0, 90, 90)), 5.0, None) == 2
    assert allocated_idle_gpus(onprem(2, (0, 0, 90, 90)), 5.0, None) == 0  # the 2 free are idle
    assert allocated_idle_gpus(onprem(3, (0, 0, 0, 90)), 5.0, None) == 2
    held = onprem(3, (0, 0, 0, 90), mem=2048.0)
    assert allocated_idle_gpus(held, 5.0, 1024.0) == 0  # memory held: busy between kernels


def test_allocated_idle_gpus_count_busy_by_default():
    s = snap(onprem(4, (0, 0, 90, 90)), jobs=(run_job("r", 4, ("gpu-01",), 36_000),))
    assert planning_view(s, make_policy()) is s


def test_allocated_idle_gpus_as_free_change_the_predicted_wait():
    busy_job = run_job("r", 4, ("gpu-01",), 36_000)  # holds all 4 GPUs for 10 more hours
    wanted = Job("p", 2, T0, partition="onprem", expected_runtime_s=600)
    s = snap(onprem(4, (0, 1, 90, 90)), jobs=(busy_job, wanted))
    lenient = make_policy(health=Health(allocated_idle_counts_busy=False))
    strict = make_policy()

    view = planning_view(s, lenient)
    assert view is not s and s.nodes[0].gpus_alloc == 4 and s.jobs[0].gpus == 4  # not mutated
    assert view.nodes[0].gpus_alloc == 2
    assert view.jobs[0].gpus == 2 and view.jobs[0].nodes == ("gpu-01",)

    p_strict = plan(planning_view(s, strict), strict, CATALOG, Backoff(), T0)
    p_lenient = plan(view, lenient, CATALOG, Backoff(), T0)
    assert p_lenient.predicted_start_ts["p"] == T0  # the two idle GPUs are taken as free
    assert p_strict.predicted_start_ts.get("p", float("inf")) > T0


def test_fully_idle_single_node_jobs_leave_the_profile_and_multi_node_jobs_stay():
    a = run_job("a", 2, ("gpu-01",), 100)  # ends first: shrunk first
    b = run_job("b", 1, ("gpu-01",), 9000)
    multi = run_job("m", 8, ("gpu-02", "gpu-03"), 9000)
    s = snap(onprem(3, (0, 0, 0, 90)), jobs=(a, b, multi))
    view = planning_view(s, make_policy(health=Health(allocated_idle_counts_busy=False)))
    by_id = {j.job_id: j for j in view.jobs}
    assert (by_id["a"].gpus, by_id["a"].nodes) == (0, ())
    assert by_id["b"] is b and by_id["m"] is multi
    assert view.nodes[0].gpus_alloc == 1
