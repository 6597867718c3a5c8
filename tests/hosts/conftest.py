"""Test hosts: burst instances booted as hosts of their own (provisioner.testing.hosts).

The Debian roots are built by `make test-host-roots` (scripts/test-host-root.sh), which
`make test` runs first; `make test` also sets REQUIRE_TEST_HOSTS=1, so a missing root or tool
fails these tests there instead of skipping them. Elsewhere they skip, naming what is missing.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import secrets
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from provisioner.command_runner import SubprocessRunner
from provisioner.domain.nodes import Node
from provisioner.observe.slurm.parse import parse_scontrol_nodes
from provisioner.testing import hosts
from provisioner.testing.fake_gce import FakeGCE
from provisioner.testing.moto_faults import FaultyMotoServer, use_test_credentials

REPO = Path(__file__).resolve().parents[2]
ROOTS = {
    suite: Path(
        os.environ.get(f"TEST_HOST_ROOT_{suite.upper()}", f"{REPO}/.slurm-roots/host-{suite}")
    )
    for suite in ("bookworm", "trixie")
}


def _missing(suite: str) -> str:
    why = hosts.available()
    if why:
        return why
    if not (ROOTS[suite] / ".provisioner-root").exists():
        return f"no test-host root at {ROOTS[suite]} (make test-host-roots)"
    return ""


def host_root(suite: str) -> Path:
    """The root for `suite`, or a skip (a failure under REQUIRE_TEST_HOSTS=1) naming why not."""
    why = _missing(suite)
    if why:
        if os.environ.get("REQUIRE_TEST_HOSTS") == "1":
            pytest.fail(f"REQUIRE_TEST_HOSTS=1 but {why}")
        pytest.skip(why)
    return ROOTS[suite]


SUITES = ("bookworm", "trixie")  # Debian 12 (Slurm 22.05, Python 3.11), 13 (24.11, 3.13)


# A VM may take up to the join timeout (join_world.JOIN_TIMEOUT_S) to join on a loaded machine
# and a test waits out several such steps: more than the suite's 300 s per test, so that the
# test's own deadline (with its story of what happened) fires first.
HOST_TEST_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("testhosts") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(HOST_TEST_TIMEOUT_S))


@pytest.fixture(params=SUITES)
def suite(request: pytest.FixtureRequest) -> str:
    """Each test host test runs on both roots: the Slurm versions burst VMs may run."""
    return str(request.param)


@pytest.fixture(autouse=True)
def own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests run their own clusters and clouds: what another suite's session fixtures put
    in the environment (a live cluster's SLURM_*, its PROVISIONER_SLURM_BIN_DIR pointing at
    Slurm 24.11's commands) must not reach the controller's settings or slurm-up.sh."""
    for key in list(os.environ):
        if key.startswith(("PROVISIONER_", "SLURM")):
            monkeypatch.delenv(key)


@pytest.fixture(scope="session")
def test_network() -> Iterator[str]:
    """The tests' /24, up for the session; every host, namespace and link removed after."""
    if hosts.available():
        host_root("bookworm")  # skips or fails with the reason
    hosts.clean_leftovers()  # a killed earlier run
    hosts.network_up()
    yield hosts.HOST_ADDRESS
    left = hosts.clean_leftovers()
    hosts.network_down()
    assert not [x for x in left if not x.startswith("link gbtbr0")], left


# --------------------------------------------------------------------------- the test cluster


def load_env_sh(path: Path) -> dict[str, str]:
    found = (
        re.match(r"^export ([A-Z_][A-Z0-9_]*)=(.*)$", x.strip())
        for x in path.read_text().splitlines()
    )
    return {m.group(1): m.group(2) for m in found if m}


SERIES = {"bookworm": "22.05", "trixie": "24.11"}  # a host's slurmd joins a slurmctld as new
PORT_BASE = {"bookworm": 7017, "trixie": 7117}  # beside the main clusters' 6817 and 6917


@dataclass
class HostCluster:
    """A real slurmctld for test hosts (scripts/slurm-up.sh BURST_NODES=hosts): it listens on
    this machine's address on the tests' /24 only, serves its config (configless), takes the
    test-host root's munge key (a key baked into the image) and declares CLOUD nodes only."""

    suite: str
    dir: Path
    env: dict[str, str]
    runner: SubprocessRunner

    @property
    def series(self) -> str:
        return SERIES[self.suite]

    @property
    def port(self) -> int:
        return PORT_BASE[self.suite]

    @property
    def munge_socket(self) -> str:
        conf = Path(self.env["SLURM_CONF"]).read_text()
        return next(
            line.split("socket=", 1)[1].strip()
            for line in conf.splitlines()
            if line.startswith("AuthInfo=socket=")
        )

    @property
    def munge_socket_here(self) -> str:
        """The cluster munged's socket as this machine sees it (24.11: inside its root)."""
        root = self.dir / "root"
        prefix = root.read_text().strip() if root.exists() else ""
        return prefix + self.munge_socket

    def sh(self, *argv: str, timeout: float = 20) -> str:
        res = self.runner.run(list(argv), timeout_s=timeout)
        assert res.ok, res.describe()
        return res.stdout

    def nodes(self) -> dict[str, Node]:
        """Slurm's nodes now, read by the controller's own parser."""
        return {n.name: n for n in parse_scontrol_nodes(self.sh("scontrol", "-o", "show", "node"))}

    def node_addr(self, node: str) -> str:
        return self.nodes()[node].address

    def down(self, keep_log: Path | None = None) -> None:
        """Stop and purge; `keep_log`: copy slurmctld's log there first (for a failure's story)."""
        if keep_log is not None:
            log = self.dir / "log" / "slurmctld.log"
            if log.exists():
                keep_log.write_bytes(log.read_bytes())
        script = REPO / "scripts" / "slurm-down.sh"
        subprocess.run(["bash", str(script), str(self.dir), "--purge"], capture_output=True)


def start_host_cluster(
    suite: str,
    n_cloud: int = 2,
    prefix: str = "cloud-aws",
    *,
    cloud_reg_addrs: bool = False,
    features: str = "cloud,aws,us-east-1,spot",
    munge_key: Path | None = None,
    node_mem_mb: int = 1000,
) -> HostCluster:
    """A fresh cluster (state purged) for the hosts of `suite`. `cloud_reg_addrs`: slurmctld
    takes NodeAddr from registrations (not the controller's mode)."""
    root = host_root(suite)
    sdir = REPO / ".slurm-hosts" / SERIES[suite]
    env = dict(os.environ)
    env.update(
        SLURM_SERIES=SERIES[suite],
        BURST_NODES="hosts",
        N_ONPREM="0",
        N_CLOUD=str(n_cloud),
        CLOUD_PREFIX=prefix,
        CLOUD_FEATURES=features,
        CTLD_ADDR=hosts.HOST_ADDRESS,
        PORT_BASE=str(PORT_BASE[suite]),
        WITH_REST="0",
        # the image's own key (a key baked into the image), unless the test hands out another
        MUNGE_KEY_FROM=str(munge_key or root / "etc" / "munge" / "munge.key"),
        RESUME_TIMEOUT="300",  # above the controller's join timeout (join_world.py)
        CLOUD_REG_ADDRS="1" if cloud_reg_addrs else "0",
        NODE_MEM=str(node_mem_mb),  # each node's declared RealMemory
    )
    script = REPO / "scripts"
    subprocess.run(
        ["bash", str(script / "slurm-down.sh"), str(sdir), "--purge"], capture_output=True
    )
    proc = subprocess.run(
        ["bash", str(script / "slurm-up.sh"), str(sdir)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"slurm-up.sh (hosts, {SERIES[suite]}) failed:\n{proc.stdout}\n{proc.stderr}")
    cenv = load_env_sh(sdir / "env.sh")
    runner = SubprocessRunner(
        slurm_conf=cenv["SLURM_CONF"], bin_dir=cenv.get("SLURM_BIN_DIR") or None
    )
    return HostCluster(suite, sdir, cenv, runner)


@pytest.fixture
def host_cluster(test_network: str, suite: str, tmp_path: Path) -> Iterator[HostCluster]:
    cluster = start_host_cluster(suite)
    try:
        yield cluster
    finally:
        cluster.down(keep_log=tmp_path / "slurmctld.log")


@pytest.fixture
def moto_server_on_test_net(
    test_network: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FaultyMotoServer]:
    """moto's server bound to this machine's address on the tests' /24, never 0.0.0.0."""
    use_test_credentials(monkeypatch)
    server = FaultyMotoServer(host=test_network).start()
    server.reset()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def moto_on_test_net(moto_server_on_test_net: FaultyMotoServer) -> str:
    return moto_server_on_test_net.endpoint


AGENT_WHEELS = REPO / ".wheelhouse" / "agent"


@pytest.fixture
def agent_wheels(test_network: str) -> Iterator[str]:
    """The GPU agent's wheels (`make agent-wheels`: this checkout's wheel and the agent's
    dependencies) served on the tests' /24, as a site's artifact store would serve them: the
    URL a pool's VMs install the agent from (there is no internet on the test network)."""
    if not any(AGENT_WHEELS.glob("gpu_burst_provisioner-*.whl")):
        pytest.fail(f"no agent wheels in {AGENT_WHEELS}: run make agent-wheels (make test does)")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(AGENT_WHEELS))
    server = http.server.ThreadingHTTPServer((hosts.HOST_ADDRESS, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{hosts.HOST_ADDRESS}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def gce_on_test_net(test_network: str) -> Iterator[FakeGCE]:
    """The GCE fake bound to this machine's address on the tests' /24, its VMs given
    addresses there."""
    fake = FakeGCE(op_polls_until_done=1, host=test_network, subnet=hosts.SUBNET).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def gcp_cluster(test_network: str, suite: str, tmp_path: Path) -> Iterator[HostCluster]:
    """A fresh cluster whose burst nodes are a GCP pool's (`cloud-gcp-<n>`)."""
    cluster = start_host_cluster(suite, prefix="cloud-gcp", features="cloud,gcp,us-central1,spot")
    try:
        yield cluster
    finally:
        cluster.down(keep_log=tmp_path / "slurmctld.log")


@pytest.fixture
def enforcing_moto(
    test_network: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, tuple[str, str]]]:
    """moto in its own process on the /24, IAM enforced after the first three calls (which
    make the administrator); the environment carries the administrator's keys (for the
    metadata stand-ins this process starts)."""
    import boto3

    from provisioner.testing.moto_faults import TEST_CREDENTIALS, iam_enforcing_moto

    with iam_enforcing_moto(test_network) as endpoint:
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        iam.create_user(UserName="admin")
        everything = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
        iam.put_user_policy(
            UserName="admin", PolicyName="admin", PolicyDocument=json.dumps(everything)
        )
        k = iam.create_access_key(UserName="admin")["AccessKey"]
        keys = (k["AccessKeyId"], k["SecretAccessKey"])
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys[0])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys[1])
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        yield endpoint, keys


def fresh_key_cluster_of(
    suite: str, tmp_path: Path, **kw: str
) -> Iterator[tuple[HostCluster, bytes]]:
    """A cluster whose munge key is a fresh one, not the key baked into the test-host root: a
    VM that joins it proves it read the key from the cloud's secret store."""
    key = secrets.token_bytes(1024)
    (tmp_path / "munge.key").write_bytes(key)
    cluster = start_host_cluster(suite, munge_key=tmp_path / "munge.key", **kw)  # type: ignore[arg-type]
    try:
        yield cluster, key
    finally:
        cluster.down(keep_log=tmp_path / "slurmctld.log")
