"""The controller's pure helpers: idleness, allocated-but-idle waste, health alerts, energy."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
from nvml_cases import UUID0, UUID1, busy_a100, idle_a100, jobs_by_pid, mig_a100

from provisioner.agent.nvml_fake import FakeNvml
from provisioner.agent.sampler import NvmlSampler
from provisioner.domain.nodes import GpuSample, Node, NodeKind
from provisioner.domain.telemetry import (
    GpuAllocation,
    GpuReading,
    GpuTelemetry,
    HealthThresholds,
    allocated_but_idle,
    energy_cost_usd,
    gpu_energy_kwh,
    gpu_idle,
    health_alerts,
    idle_gpus_by_team,
    node_energy_kwh,
    node_gpu_idle,
    telemetry_by_node,
)

pytestmark = pytest.mark.nvml


def g(index=0, uuid=None, **kw) -> GpuReading:
    return GpuReading(index=index, uuid=uuid or f"GPU-{index}", **kw)


def tele(node="n1", ts=1000.0, *gpus: GpuReading, **kw) -> GpuTelemetry:
    return GpuTelemetry(node=node, hostname=node, sampled_ts=ts, gpus=gpus, **kw)


# --------------------------------------------------------------------------- idleness


def test_gpu_idle_verdicts():
    assert gpu_idle(g(util_pct=2.0), 5.0) is True
    assert gpu_idle(g(util_pct=5.0), 5.0) is False
    assert gpu_idle(g(util_pct=None), 5.0) is None
    assert gpu_idle(g(util_pct=0.0, mem_used_mib=30000), 5.0, mem_threshold_mib=1024) is False
    assert gpu_idle(g(util_pct=None, mem_used_mib=30000), 5.0, mem_threshold_mib=1024) is False
    assert gpu_idle(g(util_pct=0.0, mem_used_mib=100), 5.0, mem_threshold_mib=1024) is True


def test_node_gpu_idle():
    assert node_gpu_idle([], 5.0) is None
    assert node_gpu_idle([g(0, util_pct=0.0), g(1, util_pct=1.0)], 5.0) is True
    assert node_gpu_idle([g(0, util_pct=0.0), g(1, util_pct=90.0)], 5.0) is False
    assert node_gpu_idle([g(0, util_pct=0.0), g(1, util_pct=None)], 5.0) is None
    # A busy GPU decides even when another is unknown.
    assert node_gpu_idle([g(0, util_pct=None), g(1, util_pct=90.0)], 5.0) is False


def test_node_gpu_idle_accepts_domain_samples():
    samples = (GpuSample(index=0, uuid="u", util_pct=1.0, mem_used_mib=10.0),)
    assert node_gpu_idle(samples, 5.0) is True
    assert node_gpu_idle(samples, 5.0, mem_threshold_mib=5.0) is False


def test_to_gpu_samples_feeds_node_and_never_guesses_idle(clock):
    nvml = FakeNvml([idle_a100(), mig_a100()])
    with NvmlSampler(nvml, clock, node="n1") as s:
        t = s.sample()
    samples = t.to_gpu_samples()
    assert [(x.index, x.util_pct) for x in samples] == [(0, 0.0), (1, 100.0)]
    assert samples[0].energy_mj == 98_765_432.0 and samples[0].sampled_ts == t.sampled_ts
    node = Node(name="n1", kind=NodeKind.BURST, gpus=2, gpu_load=samples)
    assert node.gpus_idle_by_nvml(5.0) is False  # the MIG GPU's load is unknown: not idle
    assert node_gpu_idle(t.gpus, 5.0) is None


def test_a_mig_gpu_running_no_process_is_idle_so_its_burst_node_can_go(clock):
    # NVML gives a MIG GPU no utilisation; no compute process on any instance proves it idle
    idle_mig = replace(mig_a100(), processes=[])
    nvml = FakeNvml([idle_a100(), idle_mig])
    with NvmlSampler(nvml, clock, node="n1") as s:
        t = s.sample()
    samples = t.to_gpu_samples()
    assert [(x.index, x.util_pct) for x in samples] == [(0, 0.0), (1, 0.0)]
    node = Node(name="n1", kind=NodeKind.BURST, gpus=0, gpu_load=samples)
    assert node.gpus_idle_by_nvml(5.0) is True


# --------------------------------------------------------------------------- waste


def test_allocated_but_idle_per_team(clock):
    nvml = FakeNvml([busy_a100(), idle_a100()])
    with NvmlSampler(nvml, clock, node="n1", job_resolver=jobs_by_pid({4242: "1001"})) as s:
        t = s.sample()
    allocs = [
        GpuAllocation(node="n1", gpu_index=0, job_id="1001", team="vision", account="cv"),
        GpuAllocation(node="n1", gpu_index=1, job_id="1001", team="vision", account="cv"),
        GpuAllocation(node="n2", gpu_index=0, job_id="7", team="nlp"),  # no telemetry
    ]
    waste = allocated_but_idle(allocs, [t], util_threshold_pct=5.0)
    assert [(w.node, w.gpu_index, w.gpu_uuid, w.job_id, w.team) for w in waste] == [
        ("n1", 1, UUID1, "1001", "vision")
    ]
    assert waste[0].util_pct == 0.0 and waste[0].job_has_process is False
    assert idle_gpus_by_team(waste) == {"vision": 1}


def test_waste_never_from_unknown_utilisation():
    t = tele("n1", 0.0, g(0, util_pct=None), g(1, util_pct=0.0, mem_used_mib=50000))
    allocs = [GpuAllocation(node="n1", gpu_index=i, job_id="9", team="t") for i in (0, 1)]
    assert allocated_but_idle(allocs, {"n1": t}, 5.0, mem_threshold_mib=1024) == []
    waste = allocated_but_idle(allocs, {"n1": t}, 5.0)
    assert [w.gpu_index for w in waste] == [1] and waste[0].job_has_process is None


def test_idle_gpus_by_team_sorted():
    t = tele("n1", 0.0, g(0, util_pct=0.0), g(1, util_pct=0.0), g(2, util_pct=0.0))
    allocs = [
        GpuAllocation(node="n1", gpu_index=0, job_id="1", team="b"),
        GpuAllocation(node="n1", gpu_index=1, job_id="2", team="a"),
        GpuAllocation(node="n1", gpu_index=2, job_id="3", team="b"),
    ]
    assert idle_gpus_by_team(allocated_but_idle(allocs, [t], 5.0)) == {"a": 1, "b": 2}


# --------------------------------------------------------------------------- health


def test_health_alerts_thresholds():
    t = tele(
        "n1",
        0.0,
        g(0, temperature_c=70.0, ecc_dbe_volatile=0, xids_seen=(13,)),
        g(1, temperature_c=88.0, ecc_dbe_volatile=2, xids_seen=(31, 79, 94), remap_pending=True),
        g(2, temperature_c=97.0, remap_failure=True, retired_pages_pending=True),
        g(3, lost=True),
    )
    alerts = health_alerts(t, HealthThresholds())
    got = [(a.gpu_index, a.kind, a.severity, a.value) for a in alerts]
    assert got == [
        (1, "temperature", "warning", 88.0),
        (1, "ecc_dbe", "critical", 2.0),
        (1, "xid", "critical", 79.0),
        (1, "xid", "critical", 94.0),
        (1, "row_remap_pending", "warning", 1.0),
        (2, "temperature", "critical", 97.0),
        (2, "row_remap_failure", "critical", 1.0),
        (2, "retired_pages_pending", "warning", 1.0),
        (3, "gpu_lost", "critical", 1.0),
    ]
    assert alerts[0].message == "n1 GPU 1: 88 C" and alerts[0].threshold == 85.0


def test_health_alerts_custom_thresholds_and_many_nodes():
    th = HealthThresholds(
        temperature_warn_c=60,
        ecc_dbe_volatile_max=5,
        xid_ignore=frozenset(),
        xid_critical=frozenset(),
    )
    a = tele("b", 0.0, g(0, temperature_c=61.0, ecc_dbe_volatile=5, xids_seen=(13,)))
    b = tele("a", 0.0, g(0, temperature_c=20.0))
    alerts = health_alerts([a, b], th)
    assert [(x.node, x.kind, x.severity) for x in alerts] == [
        ("b", "temperature", "warning"),
        ("b", "xid", "warning"),
    ]


def test_health_from_sampled_xid(clock):
    nvml = FakeNvml([busy_a100(), idle_a100()])
    with NvmlSampler(nvml, clock, node="n1") as s:
        nvml.inject_xid(UUID0, 48)
        t = s.sample()
    alerts = health_alerts(t, HealthThresholds())
    assert [(a.gpu_uuid, a.kind, a.value, a.severity) for a in alerts] == [
        (UUID0, "xid", 48.0, "critical")
    ]


# --------------------------------------------------------------------------- energy


def test_energy_from_counter():
    prev = g(0, energy_mj=1_000_000, power_w=300.0)
    cur = g(0, energy_mj=1_000_000 + 3_600_000_000, power_w=300.0)  # +1 kWh
    est = gpu_energy_kwh(prev, cur, elapsed_s=3600.0)
    assert est.method == "counter" and est.kwh == pytest.approx(1.0)


def test_energy_counter_reset_falls_back_to_power():
    prev = g(0, energy_mj=9_000_000_000, power_w=200.0)
    cur = g(0, energy_mj=1_000, power_w=400.0)  # driver reloaded
    est = gpu_energy_kwh(prev, cur, elapsed_s=3600.0)
    assert est.method == "power" and est.kwh == pytest.approx(0.3)  # mean 300 W for 1 h


def test_energy_counter_wrap():
    top = 2**64 - 1_800_000_000
    est = gpu_energy_kwh(g(0, energy_mj=top), g(0, energy_mj=1_800_000_000), elapsed_s=3600.0)
    assert est.method == "counter" and est.kwh == pytest.approx(1.0)


def test_energy_implausible_delta_not_believed():
    est = gpu_energy_kwh(
        g(0, energy_mj=0, power_w=100.0), g(0, energy_mj=10**12, power_w=100.0), elapsed_s=60.0
    )
    assert est.method == "power" and est.kwh == pytest.approx(100 * 60 / 3.6e6)


def test_energy_power_only_and_nothing():
    est = gpu_energy_kwh(g(0, power_w=None), g(0, power_w=250.0), elapsed_s=7200.0)
    assert (est.method, est.kwh) == ("power", pytest.approx(0.5))
    assert gpu_energy_kwh(g(0), g(0), 60.0).method == "none"
    assert gpu_energy_kwh(g(0, energy_mj=1), g(0, energy_mj=2), 0.0).method == "none"
    assert gpu_energy_kwh(g(0, "GPU-a", energy_mj=1), g(0, "GPU-b", energy_mj=2), 9.0).kwh == 0


def test_energy_from_domain_samples():
    a = GpuSample(index=0, uuid="u", util_pct=0, energy_mj=0.0, power_w=100.0)
    b = GpuSample(index=0, uuid="u", util_pct=0, energy_mj=360_000_000.0, power_w=100.0)
    assert gpu_energy_kwh(a, b, 3600.0).kwh == pytest.approx(0.1)


def test_node_energy_and_cost():
    prev = tele("n1", 0.0, g(0, "A", energy_mj=0), g(1, "B", power_w=500.0))
    cur = tele(
        "n1",
        3600.0,
        g(0, "A", energy_mj=3_600_000_000),
        g(1, "B", power_w=500.0),
        g(2, "C", energy_mj=5),
    )
    kwh = node_energy_kwh(prev, cur)
    assert kwh == pytest.approx(1.5)
    assert energy_cost_usd(kwh, Decimal("0.12")) == Decimal("0.180000")
    assert energy_cost_usd(Decimal("2.5"), Decimal("0.1")) == Decimal("0.250000")
    with pytest.raises(ValueError):
        energy_cost_usd(float("inf"), Decimal("0.1"))


# --------------------------------------------------------------------------- payload


def test_payload_round_trip_and_strict(clock):
    nvml = FakeNvml([busy_a100(), mig_a100()])
    with NvmlSampler(nvml, clock, node="n1", job_resolver=jobs_by_pid({5151: "2002"})) as s:
        t = s.sample()
    back = GpuTelemetry.model_validate_json(t.model_dump_json())
    assert back == t
    with pytest.raises(ValueError):
        GpuTelemetry.model_validate({"node": "n1", "sampled_ts": 0, "surprise": 1})
    with pytest.raises(ValueError):
        GpuTelemetry.model_validate({"node": "n1", "sampled_ts": 0, "schema_version": 2})
    schema = GpuTelemetry.model_json_schema()
    assert {"node", "sampled_ts", "gpus", "mig_instances", "jobs"} <= set(schema["properties"])


def test_telemetry_by_node_keeps_newest():
    a1, a2, b = tele("a", 1.0), tele("a", 2.0), tele("b", 1.0)
    assert telemetry_by_node([a2, b, a1]) == {"a": a2, "b": b}
