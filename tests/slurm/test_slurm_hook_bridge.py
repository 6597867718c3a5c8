"""scripts/slurm_hook_bridge.py, the 24.11 cluster's way from a hook inside the Debian 13 root to
`provisioner slurm ...` on the host: a real listener on 127.0.0.1 and the real bash hook client
(/dev/tcp), with the real provisioner CLI writing the handoff queue."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.register.power_queue import PowerAction, SqlitePowerRequestQueue

REPO = Path(__file__).resolve().parents[2]
PROVISIONER = Path(sys.executable).parent / "provisioner"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def bridge(tmp_path: Path):
    port = _free_port()
    pid_file = tmp_path / "bridge.pid"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "slurm_hook_bridge.py"), "--port", str(port),
         "--provisioner", str(PROVISIONER), "--state-dir", str(tmp_path / "state"),
         "--pid-file", str(pid_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not pid_file.exists():  # written once listening
        assert proc.poll() is None and time.monotonic() < deadline, "bridge did not start"
        time.sleep(0.05)
    yield port, tmp_path / "state"
    proc.terminate()
    proc.wait(10)


def ask(port: int, line: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(line.encode() + b"\n")
        return s.makefile().readline().strip()


def test_hook_line_runs_the_provisioner_and_queues_requests(bridge) -> None:
    port, state = bridge
    # the hook's own client: bash /dev/tcp, as DIR/bin/resume.sh does inside the root
    script = (
        f"exec 3<>/dev/tcp/127.0.0.1/{port}; printf '%s %s\\n' resume \"$1\" >&3; "
        'IFS= read -r -t 30 reply <&3; echo "$reply"'
    )
    out = subprocess.run(
        ["bash", "-c", script, "hook", "cloud-aws-[1-2]"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "")},
        check=True,
    ).stdout.strip()
    assert out.startswith("ok resume cloud-aws-[1-2]: 2 node(s)")
    assert ask(port, "suspend cloud-aws-3").startswith("ok ")
    pending = {(r.action, r.node) for r in SqlitePowerRequestQueue(state).pending()}
    assert pending == {
        (PowerAction.RESUME, "cloud-aws-1"),
        (PowerAction.RESUME, "cloud-aws-2"),
        (PowerAction.SUSPEND, "cloud-aws-3"),
    }


@pytest.mark.parametrize(
    "line",
    ["reboot cloud-aws-1", "resume", "resume cloud-aws-1 extra", "resume cloud;rm -rf /", ""],
)
def test_bad_requests_are_refused_without_running_anything(bridge, line: str) -> None:
    port, state = bridge
    assert ask(port, line).startswith("error 2: bad request")
    assert not (state / "power-requests.sqlite").exists()


def test_provisioner_errors_come_back_to_the_hook(bridge) -> None:
    port, _ = bridge
    answer = ask(port, "resume cloud-aws-[3-1]")  # a hostlist the provisioner rejects
    assert answer.startswith("error 2:") and "hostlist" in answer
