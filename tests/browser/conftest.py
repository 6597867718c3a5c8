"""Browser tests of the web console: Debian's Chromium (`/usr/bin/chromium`) driven by
Playwright for Python. `make test` installs both (`make browser-deps`); without them these tests
fail, never skip.

Two worlds, both from `provisioner demo` run for real as a subprocess (moto's server, the real
controller, API and console; only the on-prem Slurm is the demo's in-memory fake):

- `live_demo`: the demo while it runs: sign-in, roles, the operator's pause, the live overview;
- `finished`: the same demo's store once it stopped, served by the same app with a clock frozen at
  the demo's last simulated instant, so a page and the API answer one query from one state and
  the numbers can be compared exactly (a live store moves between the two requests).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "account"))  # focus_check
SCREENSHOTS = REPO / ".screenshots"
# Generous: the CI machine has 2 cores shared with Chromium, moto and the demo's loop.
STARTUP_S = 120.0
WAIT_MS = 60_000


@dataclass
class Demo:
    url: str
    viewer: str
    operator: str
    proc: subprocess.Popen[str]
    lines: list[str]
    data_dir: Path


@dataclass
class Served:
    url: str
    viewer: str
    operator: str
    store: Any
    now: str
    # The UTC day the demo's simulated time began: windows from there hold all its data, even
    # when the run crossed midnight or a month's end (the current month may then be nearly empty).
    first_day: str


def api(url: str, token: str, path: str, **params: Any) -> Any:
    r = httpx.get(
        f"{url}{path}",
        params=params,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert r.status_code == 200, (path, r.status_code, r.text[:500])
    return r.json()


def _poll(what: str, check: Any, deadline_s: float) -> Any:
    """Poll a running demo until `check()` is truthy; transient errors are retried."""
    deadline = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


@pytest.fixture(scope="session")
def live_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    data = tmp_path_factory.mktemp("demo")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "provisioner.cli",
            "demo",
            "--duration",
            "900",
            "--speed",
            "600",
            "--tick",
            "0.2",
            "--port",
            "0",
            "--data-dir",
            str(data),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=(data / "stderr.log").open("w"),
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    found: dict[str, str] = {}
    deadline = time.monotonic() + STARTUP_S
    while len(found) < 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        parts = line.split()
        if parts[:1] and parts[0] in ("console", "viewer", "operator") and len(parts) > 1:
            found[parts[0]] = parts[1]
    assert len(found) == 3, "".join(lines) + (data / "stderr.log").read_text()[-3000:]

    def drain_stdout() -> None:  # so the demo never blocks on a full pipe
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, ""):
            lines.append(line)

    reader = threading.Thread(target=drain_stdout, daemon=True)
    reader.start()
    demo = Demo(found["console"].rstrip("/"), found["viewer"], found["operator"], proc, lines, data)
    try:
        yield demo
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


@pytest.fixture(scope="session")
def finished(live_demo: Demo) -> Iterator[Served]:
    """The demo, once it recorded a whole cloud lifecycle, stopped, and its store served again."""
    from provisioner.account.focus import FocusOptions
    from provisioner.api.app import ApiDeps, create_app
    from provisioner.api.auth import create_token
    from provisioner.bootstrap import ApiServer
    from provisioner.clock import ManualClock
    from provisioner.config import load_policy
    from provisioner.demo.runner import DEMO_POLICIES
    from provisioner.store import Store

    d = live_demo

    def enough() -> bool:
        inst = api(d.url, d.viewer, "/v1/instances", limit=1000)
        ended = [i for i in inst if i["state"] == "terminated"]
        decisions = api(d.url, d.viewer, "/v1/decisions", limit=1000)
        bursts = [x for x in decisions if x["reason"].startswith("burst")]
        # and a job that ran in the cloud: the first instance to end may have run none
        cloud_jobs = api(d.url, d.viewer, "/v1/jobs", where="cloud", limit=1)
        return bool(ended and bursts and cloud_jobs)

    _poll("a burst, a terminated instance and a cloud job in the demo", enough, 300)
    d.proc.send_signal(signal.SIGINT)
    d.proc.wait(timeout=180)
    assert d.proc.returncode == 0, "".join(d.lines[-30:])
    _poll("the demo's last line", lambda: d.lines and d.lines[-1].startswith("{"), 30)
    result = json.loads(d.lines[-1])
    now = datetime.fromisoformat(result["now"].replace("Z", "+00:00"))
    policy = load_policy(DEMO_POLICIES)
    store = Store(f"sqlite:///{result['store']}")
    clock = ManualClock(now)
    viewer = create_token(store, "viewer", "browser-viewer", now.timestamp())
    operator = create_token(store, "operator", "browser-operator", now.timestamp())
    app = create_app(
        ApiDeps(
            store=store,
            clock=clock,
            policy=policy,
            focus=FocusOptions(controller=policy.controller),
        )
    )
    server = ApiServer(app, "127.0.0.1", 0)
    port = server.start(timeout_s=STARTUP_S)
    try:
        first = now - timedelta(seconds=float(result["simulated_s"]) + 1.0)
        yield Served(
            f"http://127.0.0.1:{port}",
            viewer,
            operator,
            store,
            result["now"],
            first.date().isoformat(),
        )
    finally:
        server.stop()
        store.close()


class Console:
    """A browser page signed in (or not) to one console, collecting the browser's errors."""

    def __init__(self, browser: Any, url: str) -> None:
        self.url = url
        self.context = browser.new_context(viewport={"width": 1440, "height": 1000})
        self.context.set_default_timeout(WAIT_MS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def goto(self, path: str) -> Any:
        self.page.goto(self.url + path, wait_until="load")
        self.page.wait_for_selector("body[data-ready='1']")
        return self.page

    def sign_in(self, token: str) -> None:
        self.goto("/login")
        self.page.fill("#token", token)
        with self.page.expect_navigation():
            self.page.click("#login-form button[type=submit]")
        self.page.wait_for_selector("#role")

    def shot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000
        return path

    def close(self) -> None:
        self.context.close()
