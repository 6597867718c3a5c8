"""`provisioner run` (loop + API in one process, SIGTERM finishes the pass) and
`provisioner token create`, as the commands run, against moto's server."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from ha_world import wait_for
from reconcile_world import run_env

from provisioner.api.auth import verify_token
from provisioner.bootstrap import load_settings
from provisioner.store import Store

pytestmark = pytest.mark.aws
REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "provisioner.cli", *args]


def test_settings_are_read_when_asked_not_at_import(monkeypatch):
    monkeypatch.setenv("PROVISIONER_API_PORT", "9123")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/x.conf")
    s = load_settings(tick_s=3.0)
    assert (s.api_port, s.slurm_conf, s.tick_s, s.api_host) == (
        9123,
        "/etc/slurm/x.conf",
        3.0,
        "127.0.0.1",
    )
    monkeypatch.setenv("PROVISIONER_API_PORT", "9124")
    assert load_settings().api_port == 9124


def token_create(env: dict[str, str], role: str, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli("token", "create", "--role", role, "--name", name),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_token_create_prints_the_token_once_and_stores_a_hash(db_url, moto, tmp_path):
    env = run_env(db_url, moto.endpoint)
    proc = token_create(env, "operator", "ci")
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip()
    assert token.startswith("pbt_") and token not in proc.stderr
    store = Store(env["PROVISIONER_STORE_URL"])
    p = verify_token(store, token, time.time())
    assert p is not None and p.name == "ci" and p.role.label == "operator"
    # the whole secret (it may itself hold "_": a fragment could sit in a hash by chance)
    secret = token.split("_", 2)[2]
    assert all(secret not in t.secret_hash for t in store.tokens())
    bad = token_create(env, "root", "x")
    assert bad.returncode == 2 and "--role" in bad.stderr


def test_run_serves_the_api_and_sigterm_finishes_the_pass(db_backend, db_url, moto, tmp_path):
    env = run_env(db_url, moto.endpoint)
    made = token_create(env, "viewer", "t")
    assert made.returncode == 0, made.stderr
    auth = {"Authorization": f"Bearer {made.stdout.strip()}"}
    proc = subprocess.Popen(
        cli("run"), env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        url = ""
        deadline = time.monotonic() + 60
        while not url and time.monotonic() < deadline:  # a real server must start
            line = proc.stderr.readline()
            if not line:
                break
            if "API on " in line:
                url = line.split("API on ")[1].split(",")[0]
        assert url.startswith("http://127.0.0.1:"), "no API line"
        assert httpx.get(f"{url}/healthz", timeout=10).json() == {"status": "ok"}
        assert httpx.get(f"{url}/v1/status", timeout=10).status_code == 401
        store = Store(env["PROVISIONER_STORE_URL"])
        if db_backend == "postgresql":  # HA auto: it leads by lease and says so
            lease = wait_for("the lease", lambda: store.lease("burst-demo"))

            def leadership():
                st = httpx.get(f"{url}/v1/status", headers=auth, timeout=10).json()
                return st["controller"].get("leadership")

            lead = wait_for("leadership in /v1/status", leadership)
            assert lead["role"] == "leader" and lead["token"] == 1
            assert lead["leader"] == lease.holder == lead["holder_id"]
            metrics = httpx.get(f"{url}/metrics", headers=auth, timeout=10).text
            assert f'provisioner_leader{{holder="{lease.holder}"}} 1.0' in metrics
            assert "provisioner_is_leader 1.0" in metrics
        else:  # one controller on SQLite: no lease
            status = httpx.get(f"{url}/v1/status", headers=auth, timeout=10).json()
            assert "leadership" not in status["controller"] and store.lease("burst-demo") is None
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-2000:]
        assert "stopped after" in err
    finally:  # a failed assertion must not leave the controller running
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert [p.name for p in store.pools()] == ["aws-a100"]  # the loop ran and synced policy
    if db_backend == "postgresql":  # a clean stop hands the lease back
        lease = store.lease("burst-demo")
        assert lease is not None and lease.expires_ts <= store.db_now()


def test_run_stops_after_passes(db_url, moto, tmp_path):
    env = run_env(db_url, moto.endpoint)
    proc = subprocess.run(
        cli("run", "--passes", "2"), env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert "stopped after 2 pass(es)" in proc.stderr
