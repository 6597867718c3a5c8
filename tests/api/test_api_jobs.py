"""Issues 31 and 33: `GET /v1/jobs` and `GET /v1/jobs/{id}` read the jobs table, with each job's
ledger dollars (hand-written rows) and the decision that launched its instance (the seeded
instance i-1 was launched by decision d-1). On SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

from api_helpers import NOW

from provisioner.domain.job_records import JobRecord
from provisioner.domain.records import LedgerEntry, LedgerKind

CLOUD = JobRecord(
    job_id="555",
    submit_ts=NOW - 4000,
    state="running",
    gpus=8,
    gpu_type="a100",
    partition="cloud",
    account="acct-v",
    user="ann",
    team="vision",
    start_ts=NOW - 3000,
    time_limit_s=7200.0,
    nodes=("cloud-1",),
    instance_ids=("i-1",),
    first_seen_ts=NOW - 3990,
    last_seen_ts=NOW - 10,
    predicted_runtime_s=3600.0,
    prediction_source="group",
)
ONPREM = JobRecord(
    job_id="556",
    submit_ts=NOW - 8000,
    state="completed",
    gpus=2,
    partition="onprem",
    account="acct-n",
    team="nlp",
    start_ts=NOW - 7900,
    end_ts=NOW - 4300,
    nodes=("gpu-01",),
    first_seen_ts=NOW - 7990,
    last_seen_ts=NOW - 4200,
)
WAITING = JobRecord(
    job_id="557", submit_ts=NOW - 100, state="pending", gpus=1, team="nlp",
    first_seen_ts=NOW - 90, last_seen_ts=NOW - 10,
)  # fmt: skip


def seed_jobs(env) -> None:
    env.store.record_jobs([CLOUD, ONPREM, WAITING])
    env.store.add_ledger(
        [
            LedgerEntry(NOW - 3000, NOW - 2000, LedgerKind.JOB, Decimal("2.730556"), job_id="555"),
            LedgerEntry(NOW - 2000, NOW - 1000, LedgerKind.JOB, Decimal("2.730556"), job_id="555"),
            LedgerEntry(NOW - 7900, NOW - 4300, LedgerKind.ONPREM, Decimal("2.4"), job_id="556"),
        ]
    )


def test_jobs_newest_first_with_dollars_decisions_and_predictions(fresh):
    seed_jobs(fresh)
    r = fresh.client.get("/v1/jobs", headers=fresh.h("viewer"))
    assert r.status_code == 200, r.text
    got = {j["job_id"]: j for j in r.json()}
    assert [j["job_id"] for j in r.json()] == ["557", "555", "556"]
    cloud = got["555"]
    assert cloud["where"] == "cloud" and cloud["decision_ids"] == ["d-1"]
    assert cloud["cost_usd"] == "5.461112"  # 2.730556 x 2
    assert cloud["waited_s"] == 1000.0 and cloud["ran_s"] is None
    assert (cloud["predicted_runtime_s"], cloud["prediction_source"]) == (3600.0, "group")
    onprem = got["556"]
    assert onprem["where"] == "onprem" and onprem["decision_ids"] == []
    assert onprem["cost_usd"] == "2.400000" and onprem["ran_s"] == 3600.0
    assert got["557"]["where"] == "" and got["557"]["cost_usd"] == "0.000000"


def test_job_filters_one_job_and_bad_input(fresh):
    seed_jobs(fresh)
    h = fresh.h("viewer")

    def ids(**params):
        r = fresh.client.get("/v1/jobs", params=params, headers=h)
        assert r.status_code == 200, r.text
        return [j["job_id"] for j in r.json()]

    assert ids(where="cloud") == ["555"]
    assert ids(where="onprem") == ["556"]
    assert ids(team="nlp") == ["557", "556"]
    assert ids(state="completed,pending") == ["557", "556"]
    assert ids(limit=1, offset=1) == ["555"]
    assert ids(ran_on="i-1") == ["555"]  # an instance's jobs
    r = fresh.client.get("/v1/jobs/556", headers=h)
    assert r.status_code == 200 and r.json()["ended_at"] is not None
    assert fresh.client.get("/v1/jobs/999", headers=h).status_code == 404
    bad = fresh.client.get("/v1/jobs", params={"state": "sleeping"}, headers=h)
    assert bad.status_code == 400 and "sleeping" in bad.text
    assert fresh.client.get("/v1/jobs", params={"where": "moon"}, headers=h).status_code == 422
    assert fresh.client.get("/v1/jobs").status_code == 401
