"""`provisioner agent` through typer's CliRunner, the push client and the /metrics server."""

from __future__ import annotations

import ctypes.util
import json
import logging

import httpx
import pytest
import typer
from nvml_cases import UUID0, busy_a100, idle_a100
from typer.testing import CliRunner

from provisioner.agent.cli import AgentDeps, parse_listen, register
from provisioner.agent.daemon import MetricsCache, MetricsServer, TelemetryPusher, run_agent
from provisioner.agent.nvml_api import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_UNKNOWN,
)
from provisioner.agent.nvml_fake import FakeNvml
from provisioner.agent.sampler import NvmlSampler
from provisioner.domain.telemetry import GpuTelemetry

pytestmark = pytest.mark.nvml

TOKEN = "s3cret-agent-token"


def make_app(nvml: FakeNvml, clock, **kw) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Test app."""

    register(
        app,
        AgentDeps(
            nvml_factory=lambda: nvml,
            clock=clock,
            job_resolver=lambda pid: None,
            hostname=lambda: "gpu-n1.example.org",
            **kw,
        ),
    )
    return app


def run(app, *args, env=None):
    return CliRunner().invoke(app, ["agent", *args], env=env)


# --------------------------------------------------------------------------- --once


def test_once_prints_prometheus_text(two_a100, clock):
    res = run(make_app(two_a100, clock), "--once")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz)."
    assert (
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:07:00.0",'
        'device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-n1.example.org"} 87'
    ) in lines
    assert two_a100.registered == set()  # --once does not register for Xid events
    assert two_a100.shutdowns == 1


def test_once_json_is_the_push_payload(two_a100, clock):
    res = run(make_app(two_a100, clock), "--once", "--json", "--node", "gpu-n1")
    assert res.exit_code == 0, res.output
    t = GpuTelemetry.model_validate_json(res.stdout)
    assert t.node == "gpu-n1" and t.hostname == "gpu-n1.example.org"
    assert [g.util_pct for g in t.gpus] == [87.0, 0.0]
    assert json.loads(res.stdout)["schema_version"] == 1


def test_node_defaults_to_short_hostname(two_a100, clock):
    res = run(make_app(two_a100, clock), "--json")
    assert GpuTelemetry.model_validate_json(res.stdout).node == "gpu-n1"


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1) not found"),
        (NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
        (NVML_ERROR_UNKNOWN, "NVML is not usable"),
    ],
)
def test_no_driver_clean_exit_3(clock, code, words):
    nvml = FakeNvml([busy_a100()], init_error=code)
    for args in (["--once"], ["--count", "1", "--listen", "off"]):
        res = run(make_app(nvml, clock), *args)
        assert res.exit_code == 3
        assert res.stderr.startswith("error: ") and words in res.stderr
        assert "Traceback" not in res.output
        assert res.stdout == ""


def test_no_gpu_clean_exit_3(clock):
    res = run(make_app(FakeNvml([]), clock), "--once")
    assert res.exit_code == 3 and "no NVIDIA GPU" in res.stderr


def test_real_default_command_on_this_machine():
    """The shipped command with the real pynvml backend: exit 3 without a driver, 0 with one."""
    from provisioner.cli import app

    res = CliRunner().invoke(app, ["agent", "--once"])
    assert "Traceback" not in res.output
    if ctypes.util.find_library("nvidia-ml") is None:
        assert res.exit_code == 3, res.output
        assert "error: " in res.stderr
    else:  # pragma: no cover - only on a GPU machine
        assert res.exit_code == 0, res.output
        assert "DCGM_FI_DEV_" in res.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--interval", "0"],
        ["--listen", "nohost"],
        ["--listen", "1.2.3.4:99999"],
        ["--controller", "ftp://x"],
        ["--count", "-1"],
    ],
)
def test_bad_options_exit_2(two_a100, clock, args):
    res = run(make_app(two_a100, clock), *args)
    assert res.exit_code == 2 and res.stderr.startswith("error: ")
    assert two_a100.calls == []  # rejected before touching NVML


def test_parse_listen():
    assert parse_listen("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen(":9400") == ("127.0.0.1", 9400)
    assert parse_listen("off") is None


# --------------------------------------------------------------------------- serve and push


class Controller:
    """An in-process controller (httpx.MockTransport) answering with scripted statuses."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status = self.statuses.pop(0) if self.statuses else 202
        if status == 0:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(status, json={})


def test_serve_pushes_every_interval_with_token(two_a100, clock, caplog):
    ctl = Controller(202, 503, 202)
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        clock.advance(seconds)
        return False

    app = make_app(
        two_a100,
        clock,
        wait=wait,
        http_transport=httpx.MockTransport(ctl),
        push_sleep=lambda s: None,
    )
    caplog.set_level(logging.DEBUG)
    res = run(
        app,
        *("--listen", "off", "--controller", "http://ctl.example:8080/", "--interval", "30"),
        *("--count", "2", "--node", "gpu-n1"),
        env={"PROVISIONER_AGENT_TOKEN": TOKEN},
    )
    assert res.exit_code == 0, res.output
    assert waits == [30.0]  # no real sleep: the injected wait moved the manual clock
    assert [r.url for r in ctl.requests] == ["http://ctl.example:8080/v1/telemetry"] * 3
    assert {r.headers["authorization"] for r in ctl.requests} == {f"Bearer {TOKEN}"}
    first, second = (GpuTelemetry.model_validate_json(r.content) for r in ctl.requests[::2])
    assert second.sampled_ts - first.sampled_ts == 30.0
    assert first.node == "gpu-n1" and len(first.gpus) == 2
    assert TOKEN not in caplog.text and TOKEN not in res.output


def test_serve_survives_a_dead_controller(two_a100, clock, caplog):
    ctl = Controller(0, 0, 0, 0, 0, 0)
    app = make_app(
        two_a100,
        clock,
        wait=lambda s: False,
        http_transport=httpx.MockTransport(ctl),
        push_sleep=lambda s: None,
    )
    res = run(app, "--listen", "off", "--controller", "http://ctl:1", "--count", "2")
    assert res.exit_code == 0, res.output
    assert len(ctl.requests) == 6  # 3 attempts per sample, then the next sample
    assert "failed after retries: ConnectError" in caplog.text


def test_pusher_does_not_retry_a_rejection(caplog):
    ctl = Controller(401)
    pusher = TelemetryPusher(
        "http://user:pw@ctl:1",
        TOKEN,
        client=httpx.Client(transport=httpx.MockTransport(ctl)),
        sleep=lambda s: None,
    )
    assert pusher.push(GpuTelemetry(node="n", sampled_ts=0)) is False
    assert len(ctl.requests) == 1 and pusher.failed == 1
    assert "rejected telemetry: HTTP 401" in caplog.text
    assert "pw" not in caplog.text and TOKEN not in caplog.text


def test_pusher_gives_up_on_5xx_without_raising():
    ctl = Controller(500, 502, 503, 200)
    pusher = TelemetryPusher(
        "http://ctl:1",
        None,
        client=httpx.Client(transport=httpx.MockTransport(ctl)),
        sleep=lambda s: None,
    )
    assert pusher.push(GpuTelemetry(node="n", sampled_ts=0)) is False
    assert len(ctl.requests) == 3 and "authorization" not in ctl.requests[0].headers
    assert pusher.push(GpuTelemetry(node="n", sampled_ts=1)) is True


def test_run_agent_serves_down_when_nvml_goes_away(two_a100, clock):
    cache = MetricsCache()
    s = NvmlSampler(two_a100, clock, node="n1", hostname="h1")
    s.open()
    seen: list[str] = []

    def wait(seconds: float) -> bool:
        seen.append(cache.get())
        two_a100.count_error = NVML_ERROR_DRIVER_NOT_LOADED
        return False

    stats = run_agent(s, clock, interval_s=10, cache=cache, wait=wait, max_samples=2)
    s.close()
    assert (stats.samples, stats.failed_samples) == (1, 1)
    assert 'provisioner_agent_nvml_up{Hostname="h1"} 1' in seen[0]
    assert cache.get().splitlines()[-1] == 'provisioner_agent_nvml_up{Hostname="h1"} 0'


def test_run_agent_stops_when_wait_says_so(two_a100, clock):
    s = NvmlSampler(two_a100, clock, node="n1")
    s.open()
    stats = run_agent(s, clock, interval_s=10, cache=MetricsCache(), wait=lambda _: True)
    s.close()
    assert stats.samples == 1


def test_metrics_server_on_loopback():
    cache = MetricsCache("DCGM_FI_DEV_GPU_UTIL 1\n")
    server = MetricsServer(cache, "127.0.0.1", 0)
    server.start()
    try:
        host, port = server.address
        with httpx.Client(base_url=f"http://{host}:{port}") as c:
            r = c.get("/metrics")
            assert r.status_code == 200 and r.text == "DCGM_FI_DEV_GPU_UTIL 1\n"
            assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
            assert c.get("/nope").status_code == 404
    finally:
        server.stop()


def test_listen_in_use_is_a_clean_error(two_a100, clock):
    busy = MetricsServer(MetricsCache(), "127.0.0.1", 0)
    try:
        host, port = busy.address
        res = run(
            make_app(two_a100, clock, wait=lambda s: True),
            *("--listen", f"{host}:{port}", "--count", "1"),
        )
        assert res.exit_code == 2 and "cannot listen on" in res.stderr
        assert two_a100.shutdowns == 1
    finally:
        busy.stop()


def test_serve_with_listen_answers_scrapes(clock):
    nvml = FakeNvml([busy_a100(), idle_a100()])
    scraped: list[str] = []
    holder: dict[str, int] = {}

    def wait(seconds: float) -> bool:
        # The scrape happens while the agent waits, as Prometheus would.
        scraped.append(httpx.get(f"http://127.0.0.1:{holder['port']}/metrics").text)
        return True

    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        holder["port"] = probe.getsockname()[1]
    res = run(make_app(nvml, clock, wait=wait), "--listen", f"127.0.0.1:{holder['port']}")
    assert res.exit_code == 0, res.output
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in scraped[0]


# --------------------------------------------------------------------------- no GPU here


def test_a_host_without_a_gpu_may_ask_for_idle_fake_ones(clock):
    """PROVISIONER_AGENT_FAKE_GPUS=N (a demo, a test host standing in for a burst VM): N idle
    A100s through the same sampler, named after the host; NVML itself is never asked."""
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Test app."""

    register(app, AgentDeps(clock=clock, job_resolver=lambda pid: None, hostname=lambda: "ip-1"))
    res = run(app, "--once", "--json", env={"PROVISIONER_AGENT_FAKE_GPUS": "3"})
    assert res.exit_code == 0, res.output
    payload = GpuTelemetry.model_validate_json(res.stdout[res.stdout.index("{") :])
    assert [g.uuid for g in payload.gpus] == [f"GPU-fake-ip-1-{i}" for i in range(3)]
    assert all(g.util_pct == 0 for g in payload.gpus) and payload.node == "ip-1"
    for bad in ("0", "x", "65"):
        res = run(app, "--once", env={"PROVISIONER_AGENT_FAKE_GPUS": bad})
        assert res.exit_code == 2 and "PROVISIONER_AGENT_FAKE_GPUS" in res.output


def test_the_agent_needs_no_more_than_a_burst_vm_installs():
    """What a burst VM installs beside this project's wheel (userdata.AGENT_REQUIREMENTS) is
    every third-party module the agent imports, each at pyproject.toml's floor."""
    import ast
    import sys
    import tomllib
    from pathlib import Path

    from provisioner.act.userdata import AGENT_REQUIREMENTS

    root = Path(__file__).resolve().parents[2]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    assert set(AGENT_REQUIREMENTS) <= set(deps), (AGENT_REQUIREMENTS, deps)
    installed = {r.split(">=")[0].lower() for r in AGENT_REQUIREMENTS}
    imported: set[str] = set()
    for f in (root / "provisioner" / "agent").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"provisioner", "__future__"}
    # pynvml: NVML's own binding, on a GPU host only (the agent exits 3 without it)
    assert third_party - {"pynvml"} <= installed, third_party
