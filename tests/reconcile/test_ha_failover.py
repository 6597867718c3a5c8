"""Two controllers, one leader, as real processes on one store (PostgreSQL, and SQLite where
the lease works the same): kill -9 the leader mid scale-up, SIGSTOP it past its lease, and
restart PostgreSQL under both. Expected values come from moto's records (instances ever
launched), the lease row and a hand computation of the bill (reconcile_world.books)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from ha_world import TICK_S, TTL_S, World, cycle_done, leads, wait_for
from reconcile_world import (
    CONTROLLER,
    books,
    ever_launched,
    live_instances,
    run_env,
    start_clock,
)
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from provisioner.api.auth import create_token
from provisioner.reconcile.loop import STEP_SCALE_UP_AFTER_CLOUD, STEP_SCALE_UP_AFTER_INTENT
from provisioner.store import Store
from provisioner.store.models import LedgerRow

pytestmark = [pytest.mark.ha, pytest.mark.aws]
REPO = Path(__file__).resolve().parents[2]

# One tick of slack on top of TTL + one tick: the standby's attempt, and the machine's
# scheduling of two busy processes on two cores.
TAKEOVER_BOUND_S = TTL_S + TICK_S + TICK_S


@pytest.fixture
def world(db_url, moto, tmp_path):
    clock = start_clock()
    w = World(db_url, moto.endpoint, tmp_path, clock.now().timestamp())
    moto.use_clock(w.clock().now)  # the fixture puts moto back on the wall clock after
    yield w
    w.stop_all()


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    yield s
    s.close()


def assert_one_instance_and_exact_books(store: Store, endpoint: str) -> None:
    launched = ever_launched(endpoint)
    assert len(launched) == 1, f"duplicated instances: {launched}"
    assert [si.instance.instance_id for si in store.instances()] == launched
    assert live_instances(endpoint) == []
    b = books(store)
    assert b.ledger > 0 and abs(b.ledger - b.expected) < Decimal("0.01"), b
    with store.reading() as s:
        twice = s.execute(
            select(LedgerRow.instance_id, LedgerRow.kind, LedgerRow.start_ts, LedgerRow.job_id)
            .group_by(LedgerRow.instance_id, LedgerRow.kind, LedgerRow.start_ts, LedgerRow.job_id)
            .having(func.count() > 1)
        ).all()
    assert twice == [], f"ledger rows written twice: {twice}"


@pytest.mark.parametrize("step", [STEP_SCALE_UP_AFTER_INTENT, STEP_SCALE_UP_AFTER_CLOUD])
def test_kill_9_the_leader_mid_scale_up_a_standby_takes_over_and_finishes(world, store, moto, step):
    a = world.start("ctl-a", go=False, kill_at=step)
    b = world.start("ctl-b", go=False)
    world.leader_and_standby(a, b, lambda: leads(store, "ctl-a"))
    wait_for("ctl-a to die at the step", lambda: a.proc.poll() is not None, 60)
    assert a.proc.returncode == -9, a.log()[-3000:]
    killed_at = a.status()["killed_at"]
    pending = store.pending_intents()
    assert [it.kind for it in pending] == ["scale_up"]  # the half-done work it left

    taken = wait_for("ctl-b to take over", lambda: leads(store, "ctl-b"), 30)
    assert taken.token == 2
    failover_s = taken.acquired_ts - killed_at
    assert 0 < failover_s <= TAKEOVER_BOUND_S, f"failover took {failover_s:.2f}s"

    wait_for("ctl-b to run the burst to its end", lambda: cycle_done(store), 90)
    assert store.intent(pending[0].token).status in ("confirmed", "failed")
    assert_one_instance_and_exact_books(store, moto.endpoint)
    assert b.stop() == 0


def test_a_leader_paused_past_its_lease_is_fenced_when_it_wakes(world, store, moto):
    a = world.start("ctl-a", go=False, pause_at=STEP_SCALE_UP_AFTER_INTENT)
    b = world.start("ctl-b", go=False)
    world.leader_and_standby(a, b, lambda: leads(store, "ctl-a"))
    wait_for("ctl-a to be stopped", a.stopped_by_signal, 60)
    (left,) = store.pending_intents()  # written before the cloud call it never made

    taken = wait_for("ctl-b to take over", lambda: leads(store, "ctl-b"), 30)
    assert taken.token == 2
    wait_for("ctl-b to launch its own instance", lambda: store.instances(), 30)
    assert store.intent(left.token).status == "failed"  # recovered: the call never happened
    refused_before = store.lease(CONTROLLER).refused

    a.proc.send_signal(signal.SIGCONT)
    wait_for("ctl-a to stand by", lambda: a.status().get("role") == "standby", 30)
    log = a.log()
    assert "write refused: fencing token 1 of ctl-a is stale" in log, log[-3000:]
    assert "pass stopped by fencing" in log
    assert store.lease(CONTROLLER).refused > refused_before
    # What it would have done never reached the cloud: one instance, ctl-b's.
    wait_for("ctl-b to run the burst to its end", lambda: cycle_done(store), 90)
    assert_one_instance_and_exact_books(store, moto.endpoint)
    assert a.alive() and a.status()["role"] == "standby"
    assert a.stop() == 0 and b.stop() == 0


# ---------------------------------------------------------------------------- PostgreSQL restart


def pg_ctl(url: str, action: str) -> None:
    """Stop or start the private cluster the URL's socket directory belongs to."""
    sock = Path(str(make_url(url).query["host"]))
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    cmd = f"{bins[-1]} -D {sock / 'data'} -w -t 60 {action}"
    if action == "stop":
        cmd += " -m fast"
    else:
        port = make_url(url).query.get("port", "5432")
        cmd += f' -l {sock / "log"} -o "-k {sock} -p {port} -c listen_addresses="'
    argv = ["su", "postgres", "-s", "/bin/sh", "-c", cmd] if os.getuid() == 0 else ["sh", "-c", cmd]
    subprocess.run(argv, check=True, capture_output=True, timeout=90)


def test_restart_postgresql_under_two_controllers(pg_url, moto, tmp_path):
    url = pg_url()
    w = World(url, moto.endpoint, tmp_path, start_clock().now().timestamp())
    moto.use_clock(w.clock().now)
    store = Store(url)
    try:
        a = w.start("ctl-a", go=False)
        b = w.start("ctl-b", go=False)
        w.leader_and_standby(a, b, lambda: leads(store, "ctl-a"))
        wait_for("ctl-b to stand by", lambda: b.status().get("role") == "standby")
        wait_for("the first ledger rows", lambda: store.ledger_entries(), 60)

        pg_ctl(url, "stop")
        try:
            for c in (a, b):
                wait_for(f"{c.holder} to see the outage", lambda c=c: c.status().get("error"), 30)
        finally:
            pg_ctl(url, "start")

        def recovered() -> bool:
            roles = sorted(c.status().get("role", "") for c in (a, b))
            return roles == ["leader", "standby"] and not any(
                c.status().get("error") for c in (a, b)
            )

        wait_for("both controllers to recover", recovered, 60)
        wait_for("the burst to run to its end", lambda: cycle_done(store), 90)
        assert_one_instance_and_exact_books(store, moto.endpoint)
        assert a.alive() and b.alive()
        assert a.stop() == 0 and b.stop() == 0
    finally:
        w.stop_all()
        store.close()


# ---------------------------------------------------------------------------- provisioner run


def _start_run(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    out = log.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner.cli", "run"],
        env=env,
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def api_url() -> str:
        for line in log.read_text().splitlines():
            if "API on " in line:
                return line.split("API on ")[1].split(",")[0]
        assert proc.poll() is None, log.read_text()[-2000:]
        return ""

    return proc, wait_for("the API line", api_url, 60)


def test_two_runs_on_postgresql_one_leads_the_standby_serves_reads(pg_url, moto, tmp_path):
    url = pg_url()
    store = Store(url)
    token = create_token(store, "viewer", "ha", time.time())
    auth = {"Authorization": f"Bearer {token}"}
    first, url_a = _start_run(run_env(url, moto.endpoint, lease_ttl_s="2"), tmp_path / "a.log")
    procs = [first]
    try:
        wait_for("the first to lead", lambda: store.lease("burst-demo"))
        second, url_b = _start_run(run_env(url, moto.endpoint, lease_ttl_s="2"), tmp_path / "b.log")
        procs.append(second)

        def lead(u: str) -> dict:
            r = httpx.get(f"{u}/v1/status", headers=auth, timeout=10)
            return r.json()["controller"].get("leadership") or {}

        b = wait_for(
            "the second to stand by", lambda: lead(url_b).get("role") == "standby" and lead(url_b)
        )
        a = lead(url_a)
        assert a["role"] == "leader" and b["leader"] == a["holder_id"] != b["holder_id"]
        # The standby serves the read API from the shared store.
        for path in ("/v1/costs", "/v1/budgets", "/v1/decisions", "/v1/focus.csv"):
            r = httpx.get(f"{url_b}{path}", headers=auth, timeout=30)
            assert r.status_code == 200, (path, r.text[:500])
        metrics = httpx.get(f"{url_b}/metrics", headers=auth, timeout=10).text
        assert "provisioner_is_leader 0.0" in metrics
        assert f'provisioner_leader{{holder="{a["holder_id"]}"}} 1.0' in metrics
        assert (
            httpx.get(f"{url_b}/v1/status", headers=auth, timeout=10).json()["controller"]["passes"]
            == 0
        )  # it planned and acted on nothing

        first.send_signal(signal.SIGTERM)  # a clean stop hands the lease over
        assert first.wait(timeout=60) == 0
        took = wait_for(
            "the standby to lead", lambda: lead(url_b).get("role") == "leader" and lead(url_b), 30
        )
        assert took["token"] == a["token"] + 1 and took["leader"] == b["holder_id"]
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=60)
        store.close()
