"""Issue 25 item 2: a token made the way the README says (`provisioner token create --role viewer
--name me --demo`, from the folder `make run` runs in) is written to the demo's store, so the
demo's API accepts it; without `--demo` it lands in ./provisioner.sqlite and the demo answers
401, and the command says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from provisioner.api.app import ApiDeps, create_app
from provisioner.cli import app
from provisioner.cli.controller import demo_store_path
from provisioner.clock import SystemClock
from provisioner.store import Store

# The command as README.md and docs/controller.md give it (after `provisioner`).
DOCUMENTED = ("token", "create", "--role", "viewer", "--name", "me", "--demo")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def demo_folder(tmp_path, monkeypatch):
    """A folder holding a store where the demo keeps it (`.demo/provisioner.sqlite`), opened
    the way the demo opens it; the test runs in that folder, as `make run` does."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PROVISIONER_STORE_URL", raising=False)
    db = Path(".demo") / "provisioner.sqlite"
    db.parent.mkdir()
    store = Store(f"sqlite:///{db}")
    yield store
    store.close()


def status(store: Store, token: str) -> int:
    with TestClient(create_app(ApiDeps(store=store, clock=SystemClock()))) as client:
        r = client.get("/v1/status", headers={"Authorization": f"Bearer {token}"})
    return r.status_code


def test_the_documented_command_makes_a_token_the_demo_accepts(demo_folder):
    r = invoke(*DOCUMENTED)
    assert r.exit_code == 0, r.output
    token = r.stdout.strip()
    assert token.startswith("pbt_")
    assert ".demo/provisioner.sqlite" in r.stderr and "--demo" not in r.stderr
    assert status(demo_folder, token) == 200

    listed = invoke("token", "list", "--demo")
    assert listed.exit_code == 0 and "\tme\tviewer\t" in listed.stdout
    assert invoke("token", "revoke", token, "--demo").exit_code == 0
    assert status(demo_folder, token) == 401


def test_without_demo_the_token_goes_elsewhere_and_the_command_points_at_demo(demo_folder):
    r = invoke("token", "create", "--role", "viewer", "--name", "me")
    assert r.exit_code == 0, r.output
    assert status(demo_folder, r.stdout.strip()) == 401
    assert "sqlite:///provisioner.sqlite" in r.stderr
    assert "add --demo" in r.stderr and ".demo/provisioner.sqlite" in r.stderr


def test_demo_without_a_running_demo_is_one_clear_error_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke(*DOCUMENTED)
    assert r.exit_code == 2
    assert "--demo" in r.stderr and ".demo/provisioner.sqlite" in r.stderr
    assert "make run" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_demo_and_store_together_are_refused(demo_folder, tmp_path):
    r = invoke(*DOCUMENTED, "--store", f"sqlite:///{tmp_path / 'other.sqlite'}")
    assert r.exit_code == 2 and "--demo and --store" in r.stderr
    assert not (tmp_path / "other.sqlite").exists()


@pytest.mark.aws
def test_a_documented_token_works_against_the_running_demo(tmp_path):
    """The real thing: `provisioner demo` with its defaults in a folder, then the documented
    command in that folder while it runs; the demo's own API answers 200 to the new token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVISIONER_")}
    cli = [sys.executable, "-m", "provisioner.cli"]
    demo = subprocess.Popen(
        [*cli, "demo", "--port", "0", "--duration", "120", "--tick", "0.2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert demo.stdout is not None
        url = store_line = ""
        deadline = time.monotonic() + 90
        while not (url and store_line) and time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                break
            parts = line.split()
            if parts[:1] == ["API"]:
                url = parts[1]
            elif parts[:1] == ["store"]:
                store_line = parts[1]
        assert url.startswith("http://127.0.0.1:"), "the demo printed no API address"
        # The store the demo uses is the one `--demo` opens.
        assert Path(store_line) == demo_store_path()

        made = subprocess.run(
            [*cli, *DOCUMENTED], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip()
        ok = httpx.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert ok.status_code == 200, ok.text
        assert ok.json()["controller"]["demo"]["fake_cluster"] is True
        bad = httpx.get(f"{url}/v1/status", headers={"Authorization": "Bearer pbt_x_y"}, timeout=10)
        assert bad.status_code == 401
    finally:
        demo.send_signal(signal.SIGTERM)
        try:
            demo.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.communicate()
