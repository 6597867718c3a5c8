"""What each endpoint answers, on a seeded store."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from api_helpers import NOW, T0, make_env, seed

from provisioner.store import Store


def test_status(env):
    s = env.client.get("/v1/status", headers=env.h("viewer")).json()
    assert s["now"] == "2026-01-11T00:00:00Z"
    assert s["instances_by_state"]["ready"] == 1
    assert s["cloud_usd_per_hour"] == "9.83"
    assert s["snapshot"]["pending_gpus"] == 12 and s["snapshot"]["pending_jobs"] == 2
    assert s["controller"] == {"last_pass": "ok"}
    assert s["planner_available"] is True


def test_pools(env):
    pools = {p["name"]: p for p in env.client.get("/v1/pools", headers=env.h("viewer")).json()}
    assert pools["aws-a100"]["live_instances"] == 1
    assert pools["aws-a100"]["usd_per_hour"] == "9.83"
    assert pools["gcp-a100"]["live_instances"] == 0


def test_instances_with_history(env):
    items = env.client.get("/v1/instances?live=true", headers=env.h("viewer")).json()
    assert [i["instance_id"] for i in items] == ["i-1"]
    one = env.client.get("/v1/instances/i-1", headers=env.h("viewer")).json()
    assert [(h["from"], h["to"], h["reason"]) for h in one["history"]] == [
        (None, "requested", "recorded"),
        ("requested", "allocated", "running"),
        ("allocated", "ready", "slurmd up"),
    ]
    assert one["history"][1]["at"] == "2026-01-10T22:56:40Z"
    assert one["team"] == "vision" and one["price_usd_hr"] == "9.83"
    assert env.client.get("/v1/instances?state=terminated", headers=env.h("viewer")).json() == []
    assert env.client.get("/v1/instances/i-404", headers=env.h("viewer")).status_code == 404


def test_decisions_with_alternatives_reasons_and_review(env):
    ds = env.client.get("/v1/decisions", headers=env.h("viewer")).json()
    assert [d["decision_id"] for d in ds] == ["d-1"]
    d = env.client.get("/v1/decisions/d-1", headers=env.h("viewer")).json()
    assert d["reason"] == "burst_wait_exceeds_budget"
    assert d["chosen"] == "aws/us-east-1/p4d.24xlarge/spot"
    assert [a["offer"] for a in d["alternatives"]] == [
        "aws/us-east-1/p4d.24xlarge/spot",
        "gcp/us-central1/a2-highgpu-8g/on-demand",
    ]
    assert d["alternatives"][1]["rejected_because"] == "costlier"
    assert d["iac_review"]["body"].startswith("+ aws:autoscaling")
    assert d["created_at"] == "2026-01-10T22:53:20Z"
    assert env.client.get("/v1/decisions?reason=burst_urgent", headers=env.h("viewer")).json() == []


def test_plan_dry_run(env):
    p = env.client.post("/v1/plan", headers=env.h("operator")).json()
    assert p["actions"][0]["action"] == "scale_up"
    assert p["decisions"][0]["alternatives"][0]["chosen"] is True
    assert p["planned_usd_per_hour"] == "9.83"
    assert p["created_at"] == "2026-01-11T00:00:00Z"
    assert p["predicted_start_at"] == {"101": "2026-01-11T00:05:00Z"}


def test_plan_without_planner_is_503(db_url):
    store = Store(db_url)
    env = make_env(store, planner=False)
    r = env.client.post("/v1/plan", headers=env.h("admin"))
    assert r.status_code == 503 and "planner" in r.json()["detail"]
    store.close()


def test_costs_json_and_csv(env):
    h = env.h("viewer")
    r = env.client.get("/v1/costs?group_by=team,kind&from=2026-01-10&to=2026-01-11", headers=h)
    body = r.json()
    rows = {(x["team"], x["kind"]): Decimal(x["cost_usd"]) for x in body["rows"]}
    # Cloud: i-1 at $9.83/h billed from NOW-3800 to NOW-60 = 3740 s; job 101 (8 of 8 GPUs)
    # from NOW-3000. It joined Slurm (ready) at NOW-3600: the 200 s before are `unbound`, the
    # 600 s unused after `idle`. On-prem: job 100, 8 GPUs x 1 h x $1.20.
    micro = Decimal("0.000002")
    assert abs(rows[("vision", "job")] - Decimal("9.83") * 2940 / 3600) < micro
    assert abs(rows[("vision", "idle")] - Decimal("9.83") * 600 / 3600) < micro
    assert abs(rows[("vision", "unbound")] - Decimal("9.83") * 200 / 3600) < micro
    cloud = rows[("vision", "job")] + rows[("vision", "idle")] + rows[("vision", "unbound")]
    assert cloud == Decimal("10.212278")
    assert rows[("vision", "onprem")] == Decimal("9.6")
    assert Decimal(body["total_usd"]) == sum(rows.values())
    assert body["from"] == "2026-01-10T00:00:00Z" and body["currency"] == "USD"
    text = env.client.get("/v1/costs?group_by=day&format=csv&from=2026-01-01", headers=h)
    assert text.headers["content-type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(text.text)))
    assert lines[0] == ["day", "cost_usd", "ledger_rows"] and lines[1][0] == "2026-01-10"
    # POSIX seconds work as well as ISO dates; the default window is this month to now.
    same = env.client.get(f"/v1/costs?from={NOW - 86400:.0f}&to={NOW:.0f}", headers=h).json()
    assert same["total_usd"] == body["total_usd"]
    assert env.client.get("/v1/costs", headers=h).json()["total_usd"] == body["total_usd"]


def test_costs_by_node_and_project(env):
    """The node a row was priced on and the project (the Slurm account) group like any key."""
    q = "/v1/costs?group_by=node,project&from=2026-01-10&to=2026-01-11"
    body = env.client.get(q, headers=env.h("viewer")).json()
    assert body["group_by"] == ["node", "project"]
    rows = {(x["node"], x["project"]): Decimal(x["cost_usd"]) for x in body["rows"]}
    # Same rows as above: job 101's time on cloud-1 is acct-v's; its idle and unbound time is
    # no project's; job 100 ran on gpu-01, 8 GPUs x 1 h x $1.20.
    assert abs(rows[("cloud-1", "acct-v")] - Decimal("9.83") * 2940 / 3600) < Decimal("0.000002")
    assert rows[("cloud-1", "")] + rows[("cloud-1", "acct-v")] == Decimal("10.212278")
    assert rows[("gpu-01", "acct-v")] == Decimal("9.6")
    assert len(rows) == 3


def test_budgets(env):
    b = env.client.get("/v1/budgets", headers=env.h("viewer")).json()
    vision = next(t for t in b["teams"] if t["team"] == "vision")
    assert vision["monthly_usd"] == "5000"
    assert vision["burn_usd_hr"] == "9.83"
    spent = Decimal(vision["spent_usd"])
    assert spent == (Decimal("9.83") * 3740 / 3600).quantize(Decimal("0.000001"))
    assert Decimal(vision["forecast_usd"]) == spent + Decimal("9.83") * 21 * 24
    assert b["global"]["usd_per_hour_cap"] == "200" and b["global"]["headroom_usd_hr"] == "190.17"
    assert b["month_end"] == "2026-02-01T00:00:00Z"


def test_focus_csv_streams(env):
    with env.client.stream("GET", "/v1/focus.csv", headers=env.h("viewer")) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/csv")
        text = "".join(r.iter_text())
    rows = list(csv.DictReader(io.StringIO(text)))
    assert sum(Decimal(x["BilledCost"]) for x in rows) == env.store.ledger_total()
    assert {x["x_DecisionId"] for x in rows if x["x_CostKind"] == "job"} == {"d-1"}
    none = env.client.get(
        f"/v1/focus.csv?from={T0 - 86400:.0f}&to={T0:.0f}", headers=env.h("viewer")
    )
    assert len(none.text.splitlines()) == 1  # the header only


def test_operator_pause_resume_drain(fresh):
    h = fresh.h("operator")
    r = fresh.client.post("/v1/operator/pause", json={"reason": "quota review"}, headers=h).json()
    assert r["paused"] is True and r["reason"] == "quota review"
    assert r["updated_by"].startswith("operator-bot (")
    assert fresh.store.operator_state().paused
    assert fresh.client.post("/v1/operator/pause", headers=h).status_code == 200  # no body
    assert fresh.client.post("/v1/operator/resume", headers=h).json()["paused"] is False
    d = fresh.client.post("/v1/pools/gcp-a100/drain", headers=h).json()
    assert d["drained"] is True
    assert fresh.client.get("/v1/operator", headers=h).json()["drained_pools"] == ["gcp-a100"]
    assert fresh.client.post("/v1/pools/gcp-a100/undrain", headers=h).json()["drained"] is False
    assert fresh.client.post("/v1/pools/nope/drain", headers=h).status_code == 404


def test_telemetry_roundtrip(fresh):
    payload = {
        "node": "gpu-02",
        "sampled_ts": NOW - 5,
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-a",
                "util_pct": 97.5,
                "mem_used_mib": 40000,
                "mem_total_mib": 81920,
                "power_w": 390.5,
                "energy_mj": 123456789,
                "temperature_c": 61,
            },
            {"index": 1, "uuid": "GPU-b", "util_pct": None},
        ],
    }
    r = fresh.client.post("/v1/telemetry", json=payload, headers=fresh.h("operator"))
    assert r.status_code == 202 and r.json() == {
        "node": "gpu-02",
        "gpus": 2,
        "stored": 2,
        "job_tags_dropped": 0,
    }
    (node,) = fresh.client.get("/v1/telemetry?node=gpu-02", headers=fresh.h("viewer")).json()
    assert node["received_at"] == "2026-01-11T00:00:00Z"
    assert [g["util_pct"] for g in node["gpus"]] == [97.5, 100.0]  # unknown counts as busy
    assert node["gpus"][0]["sampled_at"] == "2026-01-10T23:59:55Z"


def test_metrics(env):
    r = env.client.get("/metrics", headers=env.h("viewer"))
    assert r.status_code == 200
    text = r.text
    for line in (
        'provisioner_pending_gpu_demand{partition="onprem"} 8.0',
        'provisioner_pending_gpu_demand{partition="cloud"} 4.0',
        'provisioner_nodes{kind="onprem",state="allocated"} 1.0',
        'provisioner_instances{state="ready"} 1.0',
        "provisioner_cloud_usd_per_hour 9.83",
        'provisioner_decisions_total{reason="burst_wait_exceeds_budget"} 1.0',
        'provisioner_scale_up_failures_total{reason="capacity"} 1.0',
        "provisioner_paused 0.0",
        'provisioner_pool_drained{pool="aws-a100"} 0.0',
    ):
        assert line in text, line
    assert 'provisioner_budget_used_ratio{team="vision"}' in text
    assert all(ln.startswith(("provisioner_", "#")) for ln in text.splitlines() if ln.strip())


def test_metrics_can_be_public(db_url):
    store = Store(db_url)
    seed(store)
    env = make_env(store, metrics_public=True)
    assert env.client.get("/metrics").status_code == 200
    assert env.client.get("/v1/status").status_code == 401
    store.close()


def test_an_instance_history_shows_the_cloud_stamp_beside_the_controller_time(env):
    """`at`: when the controller saw the step; `cloud_at`: the cloud's own stamp for it,
    translated and clamped (billing starts there)."""
    from decimal import Decimal

    from api_helpers import NOW, OFFER

    from provisioner.domain.instances import CloudInstance, InstanceState, Transition

    S = InstanceState
    inst = CloudInstance(
        "i-9", "aws-a100", OFFER, "A100", 8, Decimal("9.83"), S.ALLOCATED, NOW - 600,
        history=(Transition(None, S.REQUESTED, NOW - 600, "intent"),
                 Transition(S.REQUESTED, S.ALLOCATED, NOW - 540, "cloud reports running",
                            NOW - 590)),
    )  # fmt: skip
    env.store.add_instance(inst)
    one = env.client.get("/v1/instances/i-9", headers=env.h("viewer")).json()
    steps = [(h["to"], h["at"], h["cloud_at"]) for h in one["history"]]
    assert steps == [
        ("requested", "2026-01-10T23:50:00Z", None),
        ("allocated", "2026-01-10T23:51:00Z", "2026-01-10T23:50:10Z"),
    ]
