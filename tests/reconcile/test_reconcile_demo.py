"""`provisioner demo` headless: a short, fast run serves the API, bursts, records costs and
exits 0 (what `make run` runs, until Ctrl-C)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.aws
REPO = Path(__file__).resolve().parents[2]


def test_demo_runs_headless_bursts_records_costs_and_exits_0(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "provisioner.cli",
            "demo",
            "--duration",
            "10",
            "--speed",
            "600",
            "--tick",
            "0.1",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "demo"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    url = token = ""
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while not (url and token) and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        parts = line.split()
        if parts[:1] == ["API"]:
            url = parts[1]
        elif parts[:1] == ["viewer"]:
            token = parts[1]
    assert url.startswith("http://127.0.0.1:") and token.startswith("pbt_"), lines
    h = {"Authorization": f"Bearer {token}"}
    status = httpx.get(f"{url}/v1/status", headers=h, timeout=10)
    assert status.status_code == 200 and status.json()["controller"]["demo"]["fake_cluster"]
    assert httpx.get(f"{url}/v1/status", timeout=10).status_code == 401
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["bursts"] > 0 and result["instances"] > 0
    assert float(result["cloud_usd"]) > 0 and float(result["onprem_usd"]) > 0
    assert "+ burst" in out and "cloud nodes" in out
