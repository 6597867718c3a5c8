"""Allocated-but-idle GPUs (`GET /v1/gpus/waste`, `provisioner_gpu_allocated_idle`) and health
alerts (`GET /v1/gpus/alerts`, `provisioner_gpu_health_alerts`), from pushed telemetry."""

from __future__ import annotations

from decimal import Decimal

import pytest
from nvml_ctl_helpers import (
    T0,
    add_burst_instance,
    gpu,
    make_env,
    make_policy,
    metric_lines,
    telemetry,
    usage,
)
from pydantic import ValidationError

from provisioner.account.gpu_waste import gpu_waste
from provisioner.config.models import Health
from provisioner.domain.money import cost_for_seconds
from provisioner.observe.telemetry_ingest import record_payload

pytestmark = pytest.mark.nvml

T1 = T0 - 600  # first push
JOB_START = T0 - 3600


@pytest.fixture
def env(store):
    """gpu-01 (on-prem, 4 GPUs): job 11 (vision) holds GPUs 0-1, busy on 0 and idle on 1; job 12
    (nlp) holds one GPU but runs nothing on it; GPU 3 is free. cloud-1 (burst, 8 GPUs at
    $9.83/h): job 21 (vision) sits idle on GPU 0."""
    add_burst_instance(store)
    store.record_job_usage(
        [
            usage("11", "gpu-01", 2, JOB_START, "acct-v", user="ana", partition="onprem"),
            usage("12", "gpu-01", 1, T1 + 100, "acct-n", user="bo", partition="onprem"),
            usage("21", "cloud-1", 1, JOB_START, "acct-v", instance_id="i-1", pool="aws-a100"),
            usage("9", "gpu-01", 4, T0 - 86_400, "acct-v", end_ts=T0 - 80_000),  # long over
        ]
    )
    e = make_env(store, make_policy())
    onprem = [gpu(0, 93.0), gpu(1, 0.0), gpu(2, 0.0), gpu(3, 0.0)]
    e.push(telemetry("gpu-01", T1, onprem, jobs=[("11", 0), ("11", 1)]))
    e.push(
        telemetry(
            "cloud-1",
            T1,
            [gpu(0, 0.0)] + [gpu(i, 95.0) for i in range(1, 8)],
            jobs=[("21", 0)] + [("22", i) for i in range(1, 8)],
        )
    )
    # Ten minutes later: still the same picture.
    e.push(telemetry("gpu-01", T0 - 5, onprem, jobs=[("11", 0), ("11", 1)]))
    e.push(
        telemetry(
            "cloud-1",
            T0 - 5,
            [gpu(0, 2.0)] + [gpu(i, 95.0) for i in range(1, 8)],
            jobs=[("21", 0)] + [("22", i) for i in range(1, 8)],
        )
    )
    e.at(T0)
    yield e
    e.client.close()


def test_waste_endpoint_lists_idle_allocated_gpus_per_node_job_and_team(env):
    r = env.client.get("/v1/gpus/waste", headers=env.h("viewer"))
    assert r.status_code == 200, r.text
    body = r.json()
    items = {(i["node"], i["job_id"]): i for i in body["items"]}
    assert set(items) == {("cloud-1", "21"), ("gpu-01", "11"), ("gpu-01", "12")}

    idle = items[("gpu-01", "11")]
    assert (idle["basis"], idle["gpu_index"], idle["gpus"]) == ("idle_with_process", 1, 1)
    assert (idle["team"], idle["account"], idle["user"]) == ("vision", "acct-v", "ana")
    assert idle["node_kind"] == "onprem"
    assert idle["idle_since"] == "2026-01-10T11:50:00Z"  # idle since the first push, not now
    assert idle["idle_s"] == 595.0
    assert idle["usd_per_hour"] == "1.200000"
    assert idle["usd_so_far"] == str(cost_for_seconds(Decimal("1.20"), 595.0))

    unmapped = items[("gpu-01", "12")]
    assert (unmapped["basis"], unmapped["gpu_index"], unmapped["gpus"]) == (
        "idle_unmapped",
        None,
        1,
    )
    assert unmapped["team"] == "nlp"
    assert unmapped["idle_s"] == 495.0  # since the job started, after the GPU went idle

    cloud = items[("cloud-1", "21")]
    assert cloud["node_kind"] == "burst"
    assert cloud["usd_per_gpu_hour"] == "1.22875"  # $9.83/h over 8 GPUs
    assert cloud["usd_per_hour"] == "1.228750"

    assert body["gpus"] == 3
    assert body["usd_per_hour"] == "3.628750"
    assert {t["team"]: t["gpus"] for t in body["by_team"]} == {"nlp": 1, "vision": 2}
    assert {n["node"]: n["gpus"] for n in body["by_node"]} == {"cloud-1": 1, "gpu-01": 2}
    assert body["silent_nodes"] == []


def test_waste_filters_roles_and_stale_telemetry(env):
    assert env.client.get("/v1/gpus/waste").status_code == 401
    r = env.client.get("/v1/gpus/waste?team=nlp", headers=env.h("viewer")).json()
    assert [i["job_id"] for i in r["items"]] == ["12"]
    r = env.client.get("/v1/gpus/waste?node=cloud-1", headers=env.h("viewer")).json()
    assert [i["job_id"] for i in r["items"]] == ["21"]
    assert env.client.get("/v1/gpus/waste?max_age_s=0", headers=env.h("viewer")).status_code == 422
    env.at(T0 + 3600)  # the agents went quiet: no waste claimed from old readings
    r = env.client.get("/v1/gpus/waste", headers=env.h("viewer")).json()
    assert r["items"] == [] and r["gpus"] == 0
    assert [n["node"] for n in r["silent_nodes"]] == ["cloud-1", "gpu-01"]


def test_waste_metrics(env):
    text = env.client.get("/metrics", headers=env.h("viewer")).text
    assert metric_lines(text, "provisioner_gpu_allocated_idle") == [
        'provisioner_gpu_allocated_idle{node="cloud-1",team="vision"} 1.0',
        'provisioner_gpu_allocated_idle{node="gpu-01",team="nlp"} 1.0',
        'provisioner_gpu_allocated_idle{node="gpu-01",team="vision"} 1.0',
    ]
    assert metric_lines(text, "provisioner_gpu_allocated_idle_usd_per_hour") == [
        'provisioner_gpu_allocated_idle_usd_per_hour{team="nlp"} 1.2',
        'provisioner_gpu_allocated_idle_usd_per_hour{team="vision"} 2.42875',
    ]


def test_busy_gpus_and_unjudged_gpus_are_never_waste(store):
    policy = make_policy()
    store.record_job_usage([usage("1", "n", 2, T0 - 100, "acct-v")])
    mig = gpu(1, None, mig_enabled=True)  # NVML gives no utilisation on a MIG GPU
    lost = gpu(2, None, lost=True)
    record_payload(
        store, telemetry("n", T0, [gpu(0, 50.0), mig, lost], jobs=[("1", 0), ("1", 1)]), T0, policy
    )
    assert gpu_waste(store, policy, T0).items == ()


def test_without_job_mapping_waste_is_a_lower_bound_and_ambiguity_is_said(store):
    """An agent that cannot map processes to jobs: 3 of 4 GPUs allocated (jobs a: 2, b: 1, two
    teams), one GPU busy. At least 2 allocated GPUs are idle; one surely belongs to a, the other
    could be a's or b's."""
    policy = make_policy()
    store.record_job_usage(
        [usage("a", "n", 2, T0 - 100, "acct-v"), usage("b", "n", 1, T0 - 100, "acct-n")]
    )
    record_payload(
        store, telemetry("n", T0, [gpu(0, 80.0), gpu(1, 0), gpu(2, 0), gpu(3, 0)]), T0, policy
    )
    items = gpu_waste(store, policy, T0).items
    assert [(i.job_id, i.gpus, i.team, i.candidate_jobs) for i in items] == [
        ("a", 1, "vision", ()),
        ("", 1, "", ("a", "b")),
    ]
    assert sum(i.gpus for i in items) == 2


def test_memory_threshold_counts_held_memory_as_busy(store):
    policy = make_policy(health=Health(idle_mem_used_mib=1024.0))
    store.record_job_usage([usage("1", "n", 1, T0 - 100, "acct-v")])
    held = gpu(0, 0.0, mem_used_mib=20_000)
    record_payload(store, telemetry("n", T0, [held], jobs=[("1", 0)]), T0, policy)
    assert gpu_waste(store, policy, T0).items == ()


def test_idle_since_restarts_when_busy_and_older_payloads_do_not_overwrite(store):
    policy = make_policy()
    store.record_job_usage([usage("1", "n", 1, T0 - 10_000, "acct-v")])
    for ts, util in ((T0 - 300, 0.0), (T0 - 200, 60.0), (T0 - 100, 0.0), (T0, 0.0)):
        assert record_payload(
            store, telemetry("n", ts, [gpu(0, util)], jobs=[("1", 0)]), ts, policy
        )
    assert not record_payload(store, telemetry("n", T0 - 50, [gpu(0, 90.0)]), T0, policy)
    (item,) = gpu_waste(store, policy, T0).items
    assert (item.idle_since_ts, item.idle_s) == (T0 - 100, 100.0)


# --------------------------------------------------------------------------- alerts


def test_alerts_endpoint_applies_policy_thresholds(store):
    env = make_env(store, make_policy())  # warn 80 C, critical 90 C, DBE max 0
    hot = gpu(0, 90.0, temperature_c=83.0)
    broken = gpu(1, 0.0, temperature_c=91.0, ecc_dbe_volatile=2, xids_seen=(13, 79, 31))
    fine = gpu(2, 0.0, temperature_c=70.0, ecc_dbe_volatile=0)
    env.push(telemetry("gpu-01", T0 - 5, [hot, broken, fine]))
    env.push(telemetry("gpu-old", T0 - 7200, [gpu(0, 0.0, temperature_c=99.0)]))
    env.at(T0)
    r = env.client.get("/v1/gpus/alerts", headers=env.h("viewer"))
    assert r.status_code == 200, r.text
    body = r.json()
    got = [
        (a["gpu_index"], a["kind"], a["severity"], a["value"], a["threshold"])
        for a in body["alerts"]
    ]
    assert got == [
        (0, "temperature", "warning", 83.0, 80.0),
        (1, "temperature", "critical", 91.0, 90.0),
        (1, "ecc_dbe", "critical", 2.0, 0.0),
        (1, "xid", "critical", 79.0, None),  # 13 and 31 are the application's, not the GPU's
    ]
    assert body["counts"] == {"critical": 3, "warning": 1}
    assert body["thresholds"]["temperature_warn_c"] == 80.0
    assert body["alerts"][0]["sampled_at"] == "2026-01-10T11:59:55Z"
    assert body["silent_nodes"] == [{"node": "gpu-old", "last_sample_at": "2026-01-10T10:00:00Z"}]

    crit = env.client.get("/v1/gpus/alerts?severity=critical", headers=env.h("viewer")).json()
    assert {a["kind"] for a in crit["alerts"]} == {"temperature", "ecc_dbe", "xid"}
    old = env.client.get("/v1/gpus/alerts?max_age_s=86400", headers=env.h("viewer")).json()
    assert ("gpu-old", "critical") in {(a["node"], a["severity"]) for a in old["alerts"]}
    assert (
        env.client.get("/v1/gpus/alerts?severity=bad", headers=env.h("viewer")).status_code == 422
    )
    assert env.client.get("/v1/gpus/alerts").status_code == 401

    text = env.client.get("/metrics", headers=env.h("viewer")).text
    assert metric_lines(text, "provisioner_gpu_health_alerts") == [
        'provisioner_gpu_health_alerts{kind="ecc_dbe",node="gpu-01",severity="critical"} 1.0',
        'provisioner_gpu_health_alerts{kind="temperature",node="gpu-01",severity="critical"} 1.0',
        'provisioner_gpu_health_alerts{kind="temperature",node="gpu-01",severity="warning"} 1.0',
        'provisioner_gpu_health_alerts{kind="xid",node="gpu-01",severity="critical"} 1.0',
    ]
    env.client.close()


def test_stricter_policy_thresholds_raise_more_alerts(store):
    lenient = make_policy(health=Health(temperature_warn_c=95.0, ecc_dbe_volatile_max=5))
    env = make_env(store, lenient)
    env.push(telemetry("n", T0, [gpu(0, 0.0, temperature_c=91.0, ecc_dbe_volatile=2)]))
    assert env.client.get("/v1/gpus/alerts", headers=env.h("viewer")).json()["alerts"] == []
    env.client.close()


def test_non_finite_extra_readings_are_refused_by_the_schema(store):
    # Issue 16: a reading that is not a finite number never becomes a payload (the API answers
    # 422 naming the field), so nothing non-finite can reach the store.
    with pytest.raises(ValidationError, match="mem_util_pct"):
        gpu(0, 0.0, mem_util_pct=float("inf"), sm_clock_mhz=None)
    assert store.telemetry_payloads("n") == []
