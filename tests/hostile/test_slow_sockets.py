"""Issue 30: slow sockets are closed. uvicorn has no header or body read timeout, so the API
runs behind Debian's nginx, with the shipped config (deploy/nginx-provisioner.conf, its
timeouts cut from 10 s to 1 s so the test is short). Against the API served directly the same
slow sockets stay open: that is the finding, reproduced."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from provisioner.api.app import ApiDeps, create_app
from provisioner.bootstrap import ApiServer
from provisioner.clock import ManualClock
from provisioner.store import Store

pytestmark = pytest.mark.hostile

REPO = Path(__file__).resolve().parents[2]
T0 = 1_768_046_400.0
DEADLINE_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        assert proc.poll() is None, "nginx exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nginx did not listen on {port}")


@pytest.fixture
def api(tmp_path: Path) -> Iterator[int]:
    store = Store(f"sqlite:///{tmp_path / 'api.sqlite'}")
    deps = ApiDeps(store=store, clock=ManualClock(datetime.fromtimestamp(T0, UTC)))
    server = ApiServer(create_app(deps), "127.0.0.1", 0)
    try:
        yield server.start(timeout_s=60)
    finally:
        server.stop()
        store.close()


@pytest.fixture
def nginx(tmp_path: Path, api: int) -> Iterator[int]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    assert Path(binary).exists(), "nginx-light is missing: make proxy-deps installs it"
    port = free_port()
    site = (REPO / "deploy" / "nginx-provisioner.conf").read_text()
    site = site.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{api};")
    site = site.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{port};")
    site = site.replace("_timeout 10s;", "_timeout 1s;")
    (tmp_path / "site.conf").write_text(site)
    for d in ("logs", "tmp"):
        (tmp_path / d).mkdir()
    (tmp_path / "nginx.conf").write_text(
        f"""
user root;
worker_processes 1;
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/logs/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp_path}/tmp/body;
    proxy_temp_path {tmp_path}/tmp/proxy;
    fastcgi_temp_path {tmp_path}/tmp/fastcgi;
    uwsgi_temp_path {tmp_path}/tmp/uwsgi;
    scgi_temp_path {tmp_path}/tmp/scgi;
    include {tmp_path}/site.conf;
}}
"""
    )
    proc = subprocess.Popen(
        [binary, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_port(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def slow_sockets(port: int, n_header: int, n_body: int) -> list[socket.socket]:
    out = []
    for i in range(n_header + n_body):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i < n_header:  # a request head that never ends
            s.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        else:  # a body that never comes
            s.sendall(
                b"POST /v1/telemetry HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"node": '
            )
        s.setblocking(False)
        out.append(s)
    return out


def is_closed(s: socket.socket) -> bool:
    """The server closed it (EOF, a reset), possibly after a last answer (408)."""
    try:
        while True:
            if s.recv(65536) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_nginx_closes_slow_header_and_body_sockets_the_api_alone_keeps(api, nginx):
    direct = slow_sockets(api, 20, 10)
    proxied = slow_sockets(nginx, 100, 40)
    try:
        end = time.monotonic() + DEADLINE_S
        open_ = list(proxied)
        while open_ and time.monotonic() < end:
            with httpx.Client(base_url=f"http://127.0.0.1:{nginx}", timeout=10) as c:
                assert c.get("/openapi.json").status_code == 200  # genuine clients get through
            open_ = [s for s in open_ if not is_closed(s)]
            time.sleep(0.1)
        assert open_ == [], f"{len(open_)} of 140 slow sockets still open behind nginx"
        still = [s for s in direct if not is_closed(s)]
        assert len(still) == len(direct), "uvicorn alone closed a slow socket"
    finally:
        for s in direct + proxied:
            s.close()
