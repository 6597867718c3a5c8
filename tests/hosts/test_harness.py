"""The harness itself: hosts boot the way a VM boots, from their own NoCloud seed, each in a
namespace of its own on the tests' /24, and leave nothing behind."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.testing import hosts
from tests.hosts.conftest import host_root

pytestmark = pytest.mark.testhosts

# Each host reports what it knows of itself, from inside: cloud-init's own view of the seed,
# its hostname, its PID 1, its eth0 address, and what it fetched from a server on the /24.
REPORT = """#cloud-config
runcmd:
  - - python3
    - -c
    - |
      import json, socket, subprocess, urllib.request
      def get(url):
          try:
              return urllib.request.urlopen(url, timeout=3).read().decode()
          except OSError as e:
              return "unreachable: %s" % type(e).__name__
      out = {{
          "instance_id": subprocess.run(["cloud-init", "query", "instance_id"],
                                        capture_output=True, text=True).stdout.strip(),
          "hostname": socket.gethostname(),
          "pid1": open("/proc/1/comm").read().strip(),
          "eth0": subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"],
                                 capture_output=True, text=True).stdout.split()[3],
          "from_test_net": get("http://{net}:{port}/hello"),
          "from_machine_loopback": get("http://127.0.0.1:{loopback_port}/hello"),
      }}
      open("/mnt/out/report.tmp", "w").write(json.dumps(out))
  - [mv, /mnt/out/report.tmp, /mnt/out/report.json]
"""


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello {self.client_address[0]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(address: str) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer((address, 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def test_net_server(test_network: str) -> Iterator[int]:
    yield from _serve(test_network)


@pytest.fixture
def loopback_server() -> Iterator[int]:
    yield from _serve("127.0.0.1")


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.split()}


def test_two_hosts_boot_from_their_own_seeds_and_leave_nothing(
    test_network: str, test_net_server: int, loopback_server: int, tmp_path: Path, suite: str
) -> None:
    import json

    root = host_root(suite)
    user_data = REPORT.format(net=test_network, port=test_net_server, loopback_port=loopback_server)
    specs = [
        hosts.HostSpec("i-0a1b2c3d4e5f60001", "burst-gpu-1", 21, user_data),
        hosts.HostSpec("i-0a1b2c3d4e5f60002", "burst-gpu-2", 22, user_data),
    ]
    with hosts.hosts(specs, root, tmp_path) as booted:
        reports = [json.loads(h.wait_for("report.json", 90)) for h in booted]
        inside_lo = booted[0].exec("ip", "-4", "-o", "addr", "show", "dev", "lo").stdout
    for spec, report in zip(specs, reports, strict=True):
        assert report["instance_id"] == spec.instance_id  # cloud-init read this host's seed
        assert report["hostname"] == spec.hostname
        assert report["pid1"] == "systemd"  # booted, not a chroot
        assert report["eth0"] == f"{spec.address}/24"
        # It reaches a server on the /24 from its own address, across the veth ...
        assert report["from_test_net"] == f"hello {spec.address}"
        # ... and this machine's loopback is not its loopback.
        assert report["from_machine_loopback"].startswith("unreachable")
    # The metadata address lives in the host's namespace, never on this machine.
    assert f"{hosts.METADATA_ADDRESS}/32" in inside_lo
    here = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    assert hosts.METADATA_ADDRESS not in here
    # Stopped: no namespace, veth or nspawn process of theirs is left.
    assert not {s.machine for s in specs} & _netns()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "gbtv21" not in links and "gbtv22" not in links
    # -ww: ps cuts its lines to $COLUMNS when that is set, which would hide "-M gbt-h21".
    ps = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True).stdout
    assert "-M gbt-h21" not in ps and "-M gbt-h22" not in ps


def test_a_host_that_fails_to_boot_is_removed_all_the_same(
    test_network: str, tmp_path: Path
) -> None:
    root = host_root("bookworm")
    spec = hosts.HostSpec("i-0a1b2c3d4e5f60003", "burst-gpu-3", 23, "#cloud-config\n{}\n")
    with (
        pytest.raises(hosts.HostError, match="no never-written"),
        hosts.hosts([spec], root, tmp_path) as (h,),
    ):
        h.wait_for("never-written", 5)
    assert spec.machine not in _netns()


def test_clean_leftovers_removes_what_a_killed_run_left(test_network: str) -> None:
    subprocess.run(["ip", "netns", "add", "gbt-h99"], check=True)
    subprocess.run(
        ["ip", "link", "add", "gbtv99", "type", "veth", "peer", "name", "gbtp99"], check=True
    )
    removed = hosts.clean_leftovers(network=False)
    assert "netns gbt-h99" in removed and "link gbtv99" in removed
    assert f"link {hosts.BRIDGE}" not in removed  # the session's network stays
    assert "gbt-h99" not in _netns()
    assert socket.if_nameindex()  # the machine's own links are untouched
    names = {name for _, name in socket.if_nameindex()}
    assert "gbtv99" not in names and "gbtp99" not in names


def test_clean_leftovers_ends_a_left_hosts_own_processes_too(
    test_network: str, tmp_path: Path
) -> None:
    """A run killed mid-test leaves nspawn running; killing nspawn alone would leave the host's
    systemd and everything it started alive, reparented to this machine's init."""
    root = host_root("bookworm")
    spec = hosts.HostSpec("i-left", "left", 98, "#cloud-config\n{}\n")
    host = hosts.TestHost(spec, root, tmp_path).boot()
    init = host._poll(
        "a host init", lambda: str(host.init_pid()) if _has_init(host) else "", 30, 0.1
    )
    removed = hosts.clean_leftovers(network=False)
    assert f"host init {init}" in removed
    deadline = time.monotonic() + 10
    while _alive(int(init)):  # a real process ending: poll with a deadline
        assert time.monotonic() < deadline, f"the host's init {init} outlived clean_leftovers"
        time.sleep(0.1)
    host.proc = None  # already gone; nothing left to stop


def _has_init(host: hosts.TestHost) -> bool:
    try:
        host.init_pid()
    except hosts.HostError:
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
