"""The node agent: sample NVML every interval, serve /metrics, push to the controller.

The loop is the only place that waits, and it waits through an injected function, so tests
drive it with a manual clock and never sleep. Nothing in a pass can end the agent: a failed
sample serves `provisioner_agent_nvml_up 0`, a failed push is logged and retried next pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from provisioner.agent.metrics import CONTENT_TYPE, render_down, render_metrics
from provisioner.agent.sampler import NvmlSampler, NvmlUnavailable
from provisioner.clock import Clock
from provisioner.domain.errors import ProvisionerError
from provisioner.domain.telemetry import GpuTelemetry

log = logging.getLogger("provisioner.agent")

TELEMETRY_PATH = "/v1/telemetry"
TOKEN_ENV = "PROVISIONER_AGENT_TOKEN"


# --------------------------------------------------------------------------- /metrics


class MetricsCache:
    """The latest exposition text, shared between the sampling loop and the HTTP thread."""

    def __init__(self, text: str = "") -> None:
        self._lock = threading.Lock()
        self._text = text

    def set(self, text: str) -> None:
        with self._lock:
            self._text = text

    def get(self) -> str:
        with self._lock:
            return self._text


class MetricsServer:
    """GET /metrics from the cache on a daemon thread. Scrapes never touch NVML."""

    def __init__(self, cache: MetricsCache, host: str = "127.0.0.1", port: int = 9400) -> None:
        cache_ref = cache

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body = cache_ref.get().encode()
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE)
                elif path in ("/", "/healthz"):
                    body = b"provisioner agent: see /metrics\n"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                else:
                    body = b"not found\n"
                    self.send_response(404)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics http: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="agent-metrics",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()


# --------------------------------------------------------------------------- push


class _RetryableStatus(ProvisionerError):
    """The controller answered a push with a status worth retrying (429, 5xx)."""

    retryable = True

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"HTTP {status}")


def _safe_target(url: str) -> str:
    """scheme://host[:port]/path for logs: no userinfo, no query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


@dataclass
class TelemetryPusher:
    """POST each sample to `{controller}/v1/telemetry` with a bearer token.

    Transport errors, 429 and 5xx are retried (tenacity, exponential wait, bounded in attempts
    and in time); other 4xx are not. `push` never raises and never logs the token.
    """

    controller: str
    token: str | None = field(default=None, repr=False)
    client: httpx.Client | None = None
    attempts: int = 3
    max_delay_s: float = 10.0
    timeout_s: float = 5.0
    sleep: Callable[[float], None] | None = None
    pushed: int = 0
    failed: int = 0

    def __post_init__(self) -> None:
        self.url = self.controller.rstrip("/") + TELEMETRY_PATH
        if self.client is None:
            self.client = httpx.Client(timeout=self.timeout_s)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def push(self, telemetry: GpuTelemetry) -> bool:
        body = telemetry.model_dump_json().encode()
        retrying_kwargs: dict[str, Any] = {
            "stop": stop_after_attempt(self.attempts) | stop_after_delay(self.max_delay_s),
            "wait": wait_exponential(multiplier=0.5, max=4),
            "retry": retry_if_exception_type((httpx.TransportError, _RetryableStatus)),
            "reraise": True,
        }
        if self.sleep is not None:
            retrying_kwargs["sleep"] = self.sleep
        client = self.client
        assert client is not None
        try:
            for attempt in Retrying(**retrying_kwargs):
                with attempt:
                    resp = client.post(self.url, content=body, headers=self._headers())
                    if resp.status_code == 429 or resp.status_code >= 500:
                        raise _RetryableStatus(resp.status_code)
                    if resp.status_code >= 400:
                        self.failed += 1
                        log.warning(
                            "controller %s rejected telemetry: HTTP %d",
                            _safe_target(self.url),
                            resp.status_code,
                        )
                        return False
                    self.pushed += 1
                    return True
        except Exception as exc:  # the agent outlives any controller trouble
            self.failed += 1
            reason = str(exc) if isinstance(exc, _RetryableStatus) else type(exc).__name__
            log.warning(
                "telemetry push to %s failed after retries: %s", _safe_target(self.url), reason
            )
            return False
        return False  # pragma: no cover - Retrying always runs at least once


# --------------------------------------------------------------------------- loop


@dataclass
class AgentStats:
    samples: int = 0
    failed_samples: int = 0


def run_agent(
    sampler: NvmlSampler,
    clock: Clock,
    *,
    interval_s: float,
    cache: MetricsCache,
    wait: Callable[[float], bool],
    pusher: TelemetryPusher | None = None,
    max_samples: int = 0,
    on_sample: Callable[[GpuTelemetry], None] | None = None,
) -> AgentStats:
    """Sample, publish, push; then `wait(seconds)` until the next pass (True from wait stops).

    `max_samples` 0 runs until `wait` says stop.
    """
    stats = AgentStats()
    while True:
        started = clock.now()
        try:
            telemetry = sampler.sample()
        except NvmlUnavailable as exc:
            stats.failed_samples += 1
            log.error("NVML sample failed: %s", exc)
            cache.set(render_down(sampler.hostname))
        except Exception as exc:  # never crash the agent on one bad pass
            stats.failed_samples += 1
            log.error("NVML sample failed: %s: %s", type(exc).__name__, exc)
            cache.set(render_down(sampler.hostname))
        else:
            stats.samples += 1
            cache.set(render_metrics(telemetry))
            if on_sample is not None:
                on_sample(telemetry)
            if pusher is not None:
                pusher.push(telemetry)
        if max_samples and stats.samples + stats.failed_samples >= max_samples:
            return stats
        elapsed = (clock.now() - started).total_seconds()
        if wait(max(0.0, interval_s - elapsed)):
            return stats
