"""What the API is built from (`ApiDeps`), and how a route reaches it.

Everything the app needs comes in `ApiDeps` (store, clock, the dry-run planner, ...), so tests
and the controller build it the same way and nothing is read from the environment here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from provisioner.account.focus import FocusOptions
from provisioner.api.edge import DEFAULT_MAX_BODY_BYTES
from provisioner.api.heavy_reads import HeavyReads
from provisioner.api.rate_limits import ApiRateLimiter
from provisioner.api.telemetry_guard import TelemetryGuardStats
from provisioner.clock import Clock
from provisioner.config.models import Policy
from provisioner.domain.gpu_power import BoardPower
from provisioner.domain.plan import Plan
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.munge_credentials import MungeDecoder
from provisioner.observe.spot_inbox import SpotInbox
from provisioner.ports.store import ControllerStore


@dataclass
class ApiDeps:
    """What the API is built from. Only `store` and `clock` are required.

    - `planner`: returns the plan the controller would make now (for `POST /v1/plan`, a dry run:
      it must not act). None: the endpoint answers 503.
    - `snapshot`: the latest observed `ClusterSnapshot`, for the demand and node metrics.
    - `status_extra`: more fields for `/v1/status` (e.g. the loop's last pass).
    - `metrics_public`: serve `/metrics` without a token (default: viewer token needed).
    - `policy`: the policy (or a callable giving the current one) for the GPU waste and health
      views; None: `Policy()` defaults.
    - `spot_inbox` and `munge`: where burst nodes' spot warnings go, and the decoder of the
      MUNGE credentials they come signed with; None: `POST /v1/nodes/{node}/warnings` is 503.
    - `board_power`: board power per GPU model, bounding pushed telemetry (None: the table
      shipped with the catalog). `telemetry_guard` counts the samples it refused.
    - `heavy_reads`: where the FOCUS export runs (default: in the API's thread; the controller
      gives it a process of its own); `rate_limiter`: the per-token limits of expensive reads.
    """

    store: ControllerStore
    clock: Clock
    planner: Callable[[], Plan] | None = None
    snapshot: Callable[[], ClusterSnapshot | None] | None = None
    status_extra: Callable[[], Mapping[str, Any]] | None = None
    focus: FocusOptions = field(default_factory=FocusOptions)
    metrics_public: bool = False
    version: str = "0.1.0"
    title: str = "GPU burst provisioner"
    policy: Policy | Callable[[], Policy] | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    spot_inbox: SpotInbox | None = None
    munge: MungeDecoder | None = None
    board_power: BoardPower | None = None
    telemetry_guard: TelemetryGuardStats = field(default_factory=TelemetryGuardStats)
    heavy_reads: HeavyReads = field(default_factory=HeavyReads)
    rate_limiter: ApiRateLimiter = field(default_factory=ApiRateLimiter)


def deps_of(request: Request) -> ApiDeps:
    """The `ApiDeps` the app serving `request` was built from."""
    deps: ApiDeps = request.app.state.deps
    return deps


def now_ts(deps: ApiDeps) -> float:
    return deps.clock.now().timestamp()


__all__ = ["ApiDeps", "deps_of", "now_ts"]
