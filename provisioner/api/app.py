"""The HTTP API: `create_app(deps)` builds a FastAPI app around injected parts.

Everything the app needs comes in `ApiDeps` (store, clock, the dry-run planner, ...), so tests
and the controller build it the same way and nothing is read from the environment here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from provisioner.account.budgets import budget_status
from provisioner.account.focus import FocusOptions, iter_focus_csv
from provisioner.account.reports import (
    ReportError,
    cost_report,
    parse_group_by,
    parse_kinds,
    report_to_csv,
)
from provisioner.api import edge, render
from provisioner.api.auth import Principal, Role, verify_token
from provisioner.api.edge import DEFAULT_MAX_BODY_BYTES
from provisioner.api.metrics import PassCollector, ProvisionerCollector, make_registry
from provisioner.api.telemetry_ingest import ingest
from provisioner.api.telemetry_views import GpuCollector, policy_of, telemetry_router
from provisioner.clock import Clock
from provisioner.config.models import Policy
from provisioner.domain.instances import InstanceState
from provisioner.domain.plan import Plan
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.domain.telemetry import GpuTelemetry
from provisioner.store import Store

log = logging.getLogger("provisioner.api")

API_VERSION = "v1"
MAX_LIMIT = 1000


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
    """

    store: Store
    clock: Clock
    planner: Callable[[], Plan] | None = None
    snapshot: Callable[[], ClusterSnapshot | None] | None = None
    status_extra: Callable[[], Mapping[str, Any]] | None = None
    focus: FocusOptions = field(default_factory=FocusOptions)
    metrics_public: bool = False
    version: str = "0.1.0"
    title: str = "GPU burst provisioner"
    policy: Policy | Callable[[], Policy] | None = None
    # Swagger UI at /docs loads its script from a CDN (no integrity check, and it breaks
    # offline), so it is off unless asked for; /openapi.json is always served.
    docs: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


# --------------------------------------------------------------------------- request bodies


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="", max_length=500)


class Message(BaseModel):
    detail: str


# --------------------------------------------------------------------------- helpers

_bearer = HTTPBearer(
    auto_error=False,
    description="API token: `Authorization: Bearer pbt_<id>_<secret>` "
    "(roles viewer < operator < admin).",
)


def _deps(request: Request) -> ApiDeps:
    deps: ApiDeps = request.app.state.deps
    return deps


def require(role: Role) -> Callable[..., Principal]:
    """A dependency: the caller's principal, with at least `role`; 401 or 403 otherwise."""

    def dependency(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        if creds is None or not creds.credentials:
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        deps = _deps(request)
        principal = verify_token(deps.store, creds.credentials, _now(deps))
        if principal is None:
            raise HTTPException(
                401, "invalid, expired or revoked token", headers={"WWW-Authenticate": "Bearer"}
            )
        if principal.role < role:
            raise HTTPException(
                403, f"this needs the {role.label} role; the token has {principal.role.label}"
            )
        request.state.principal = principal
        return principal

    dependency.__name__ = f"require_{role.label}"
    return dependency


Agent = Annotated[Principal, Depends(require(Role.AGENT))]
Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
Admin = Annotated[Principal, Depends(require(Role.ADMIN))]

MAX_POSIX_S = 1e10  # year 2286; a bigger number is milliseconds, which are refused


def _seconds_only(value: Any) -> Any:
    """Refuse a number past `MAX_POSIX_S`: pydantic would silently read it as milliseconds."""
    text = value.strip() if isinstance(value, str) else value
    try:
        number = float(text)
    except (TypeError, ValueError):
        return value
    if not math.isfinite(number) or abs(number) >= MAX_POSIX_S:
        raise ValueError(f"POSIX seconds must be below {MAX_POSIX_S:.0e} (not milliseconds)")
    return value


When = Annotated[
    datetime | date | None,
    BeforeValidator(_seconds_only),
    Query(description="ISO 8601 date or date-time (UTC if no offset), or POSIX seconds."),
]


def _ts(value: datetime | date | None, name: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime.combine(value, time(0), tzinfo=UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        ts = value.timestamp()
    except (OverflowError, OSError, ValueError) as exc:
        raise HTTPException(400, f"{name}: not a usable time") from exc
    if not math.isfinite(ts):
        raise HTTPException(400, f"{name}: not a usable time")
    return ts


def _window(
    deps: ApiDeps, from_: datetime | date | None, to: datetime | date | None
) -> tuple[float, float]:
    """[from, to): defaults are the start of this UTC month and now."""
    now = deps.clock.now().astimezone(UTC)
    f = _ts(from_, "from")
    t = _ts(to, "to")
    if f is None:
        f = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
    if t is None:
        t = now.timestamp()
    if not t > f:
        raise HTTPException(400, "'to' must be after 'from'")
    return f, t


def _now(deps: ApiDeps) -> float:
    return deps.clock.now().timestamp()


# --------------------------------------------------------------------------- the app


def create_app(deps: ApiDeps) -> FastAPI:
    app = FastAPI(
        title=deps.title,
        version=deps.version,
        description="Status, decisions, costs (reports, budgets, FOCUS) and operator actions "
        "of the hybrid GPU burst provisioner. All `/v1` endpoints need a bearer token.",
        openapi_url="/openapi.json",
        docs_url="/docs" if deps.docs else None,
        redoc_url=None,
    )
    app.state.deps = deps
    edge.install(app, deps.max_body_bytes)
    registry = make_registry(ProvisionerCollector(deps.store, lambda: _now(deps), deps.snapshot))
    registry.register(GpuCollector(deps))
    if deps.status_extra is not None:
        registry.register(PassCollector(deps.status_extra))

    @app.exception_handler(ReportError)
    async def _report_error(_: Request, exc: ReportError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(ValidationError)
    async def _validation_error(_: Request, exc: ValidationError) -> JSONResponse:
        errors = edge.validation_detail(exc.errors(include_input=False, include_url=False))
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Never echo the exception: it could carry request data. The log names the route only.
        log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path)
        return JSONResponse({"detail": "internal error"}, status_code=500)

    @app.get("/healthz", tags=["meta"], summary="Liveness (no token needed)")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    metrics_auth: list[Any] = [] if deps.metrics_public else [Depends(require(Role.VIEWER))]

    @app.get(
        "/metrics",
        tags=["meta"],
        summary="Prometheus metrics (provisioner_*)",
        response_class=PlainTextResponse,
        dependencies=metrics_auth,
    )
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(_ops_router(), prefix=f"/{API_VERSION}")
    app.include_router(_cost_router(), prefix=f"/{API_VERSION}")
    app.include_router(_admin_router(), prefix=f"/{API_VERSION}")
    app.include_router(telemetry_router(require(Role.VIEWER)), prefix=f"/{API_VERSION}")
    # IaC reviews (provisioner/iac): GET /v1/iac/review, viewer role. Imported here, not at the
    # top, so the API module does not load the IaC package until an app is built.
    from provisioner.iac.api import iac_router

    app.include_router(
        iac_router(dependencies=[Depends(require(Role.VIEWER))]), prefix=f"/{API_VERSION}"
    )
    # The web console (pages at `/`, sign-in, operator forms), imported late for the same reason.
    from provisioner.api.console.app import mount_console

    mount_console(app)
    return app


# --------------------------------------------------------------------------- status and ops


def _ops_router() -> APIRouter:
    r = APIRouter()

    @r.get("/status", tags=["status"], summary="Controller status")
    def status(request: Request, _: Viewer) -> dict[str, Any]:
        deps = _deps(request)
        store = deps.store
        counts = store.instance_counts()
        out: dict[str, Any] = {
            "now": render.iso(_now(deps)),
            "version": deps.version,
            "operator": render.operator_dict(store.operator_state()),
            "instances_by_state": {str(s): counts.get(str(s), 0) for s in InstanceState},
            "cloud_usd_per_hour": str(store.cloud_usd_per_hour()),
            "pending_intents": [render.intent_dict(i) for i in store.pending_intents()],
            "planner_available": deps.planner is not None,
        }
        snap = deps.snapshot() if deps.snapshot is not None else None
        if snap is not None:
            out["snapshot"] = {
                "taken_at": render.iso(snap.taken_ts),
                "stale": snap.stale,
                "stale_reasons": list(snap.stale_reasons),
                "pending_jobs": len(snap.pending),
                "pending_gpus": sum(j.gpus for j in snap.pending),
                "running_jobs": len(snap.running),
                "nodes": len(snap.nodes),
            }
        if deps.status_extra is not None:
            out["controller"] = dict(deps.status_extra())
        return out

    @r.get("/pools", tags=["pools"], summary="Burst pools, with drain flags and $/h")
    def pools(request: Request, _: Viewer) -> list[dict[str, Any]]:
        store = _deps(request).store
        live: dict[str, tuple[int, Decimal]] = {}
        for si in store.instances(live_only=True):
            n, usd = live.get(si.instance.pool, (0, Decimal(0)))
            live[si.instance.pool] = (n + 1, usd + si.instance.price_usd_hr)
        return [
            render.pool_dict(
                p,
                instances=live.get(p.name, (0, Decimal(0)))[0],
                usd_per_hour=live.get(p.name, (0, Decimal(0)))[1],
            )
            for p in store.pools()
        ]

    @r.get("/instances", tags=["instances"], summary="Cloud instances with their history")
    def instances(
        request: Request,
        _: Viewer,
        state: Annotated[InstanceState | None, Query(description="Only this state.")] = None,
        pool: Annotated[str | None, Query(max_length=64)] = None,
        live: Annotated[bool, Query(description="Only instances not yet ended.")] = False,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
        offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    ) -> list[dict[str, Any]]:
        rows = _deps(request).store.instances(
            states=[state] if state is not None else None,
            pool=pool,
            live_only=live,
            limit=limit,
            offset=offset,
        )
        return [render.instance_dict(si) for si in rows]

    @r.get(
        "/instances/{instance_id}",
        tags=["instances"],
        summary="One instance with its lifecycle history",
        responses={404: {"model": Message}},
    )
    def instance(
        request: Request, _: Viewer, instance_id: Annotated[str, Path(max_length=128)]
    ) -> dict[str, Any]:
        si = _deps(request).store.instance(instance_id)
        if si is None:
            raise HTTPException(404, "no such instance")
        return render.instance_dict(si)

    @r.get("/decisions", tags=["decisions"], summary="Planner decisions, newest first")
    def decisions(
        request: Request,
        _: Viewer,
        reason: Annotated[str | None, Query(max_length=64)] = None,
        from_: Annotated[When, Query(alias="from")] = None,
        to: When = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
        offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    ) -> list[dict[str, Any]]:
        f, t = _ts(from_, "from"), _ts(to, "to")
        if f is not None and t is not None and not t > f:
            raise HTTPException(400, "'to' must be after 'from'")
        rows = _deps(request).store.decisions(
            from_ts=f, to_ts=t, reason=reason, limit=limit, offset=offset
        )
        return [render.decision_dict(d) for d in rows]

    @r.get(
        "/decisions/{decision_id}",
        tags=["decisions"],
        summary="One decision: reasons, alternatives, IaC review",
        responses={404: {"model": Message}},
    )
    def decision(
        request: Request, _: Viewer, decision_id: Annotated[str, Path(max_length=64)]
    ) -> dict[str, Any]:
        d = _deps(request).store.decision(decision_id)
        if d is None:
            raise HTTPException(404, "no such decision")
        return render.decision_dict(d)

    @r.post(
        "/plan",
        tags=["decisions"],
        summary="Dry run: the plan the controller would make now (nothing is acted on)",
        responses={503: {"model": Message}},
    )
    def plan(request: Request, _: Operator) -> dict[str, Any]:
        deps = _deps(request)
        if deps.planner is None:
            raise HTTPException(503, "no planner is wired into this API")
        return render.plan_dict(deps.planner())

    @r.post("/operator/pause", tags=["operator"], summary="Pause bursting (no new scale-ups)")
    def pause(
        request: Request,
        who: Operator,
        body: Annotated[PauseBody | None, Body()] = None,
    ) -> dict[str, Any]:
        deps = _deps(request)
        reason = body.reason if body is not None else ""
        deps.store.set_paused(True, _now(deps), by=who.who, reason=reason)
        log.info("bursting paused by %s", who.who)
        return render.operator_dict(deps.store.operator_state())

    @r.post("/operator/resume", tags=["operator"], summary="Resume bursting")
    def resume(request: Request, who: Operator) -> dict[str, Any]:
        deps = _deps(request)
        deps.store.set_paused(False, _now(deps), by=who.who)
        log.info("bursting resumed by %s", who.who)
        return render.operator_dict(deps.store.operator_state())

    @r.post(
        "/operator/sweep/approve",
        tags=["operator"],
        summary="Let the orphan sweep held by its safety valve go ahead",
    )
    def approve_sweep(request: Request, who: Operator) -> dict[str, Any]:
        deps = _deps(request)
        deps.store.approve_sweep(_now(deps), by=who.who)
        log.warning("orphan sweep approved by %s", who.who)
        return render.operator_dict(deps.store.operator_state())

    @r.get("/operator", tags=["operator"], summary="Operator switches")
    def operator_state(request: Request, _: Viewer) -> dict[str, Any]:
        return render.operator_dict(_deps(request).store.operator_state())

    def _drain(request: Request, who: Principal, name: str, drained: bool) -> dict[str, Any]:
        deps = _deps(request)
        p = deps.store.set_pool_drained(name, drained, _now(deps), by=who.who)
        if p is None:
            raise HTTPException(404, "no such pool")
        log.info("pool %s %s by %s", name, "drained" if drained else "undrained", who.who)
        return render.pool_dict(p)

    @r.post(
        "/pools/{name}/drain",
        tags=["operator"],
        summary="Drain a pool: no new nodes; its nodes are drained and removed",
        responses={404: {"model": Message}},
    )
    def drain(
        request: Request, who: Operator, name: Annotated[str, Path(max_length=64)]
    ) -> dict[str, Any]:
        return _drain(request, who, name, True)

    @r.post(
        "/pools/{name}/undrain",
        tags=["operator"],
        summary="Undo a drain",
        responses={404: {"model": Message}},
    )
    def undrain(
        request: Request, who: Operator, name: Annotated[str, Path(max_length=64)]
    ) -> dict[str, Any]:
        return _drain(request, who, name, False)

    @r.post(
        "/telemetry",
        tags=["telemetry"],
        summary="Push one node's GPU sample (the NVML agent's payload, schema version 1)",
        status_code=202,
    )
    def post_telemetry(
        request: Request, who: Agent, payload: Annotated[GpuTelemetry, Body()]
    ) -> dict[str, Any]:
        deps = _deps(request)
        if who.role is not Role.AGENT and who.role < Role.OPERATOR:
            raise HTTPException(403, "this needs an agent token for the node, or operator")
        return ingest(deps, who, payload, policy_of(deps).telemetry)

    @r.get("/telemetry", tags=["telemetry"], summary="Latest GPU samples per node")
    def get_telemetry(
        request: Request,
        _: Viewer,
        node: Annotated[str | None, Query(max_length=128)] = None,
    ) -> list[dict[str, Any]]:
        return [render.telemetry_dict(t) for t in _deps(request).store.telemetry(node)]

    return r


# --------------------------------------------------------------------------- costs


def _cost_router() -> APIRouter:
    r = APIRouter(tags=["costs"])

    @r.get(
        "/costs",
        summary="Cost report grouped by any of team, account, user, partition, cloud, region, "
        "pool, kind, day over [from, to)",
        responses={
            200: {"content": {"application/json": {}, "text/csv": {}}},
            400: {"model": Message},
        },
    )
    def costs(
        request: Request,
        _: Viewer,
        group_by: Annotated[
            str | None,
            Query(
                max_length=200,
                description="Comma-separated keys: team, account, user, partition, cloud, "
                "region, pool, kind, day. Empty: one total.",
            ),
        ] = None,
        from_: Annotated[When, Query(alias="from")] = None,
        to: When = None,
        kind: Annotated[
            str | None,
            Query(max_length=100, description="Only these kinds: job, idle, onprem, energy."),
        ] = None,
        format: Annotated[Literal["json", "csv"], Query()] = "json",
    ) -> Any:
        deps = _deps(request)
        keys = parse_group_by(group_by)
        kinds = parse_kinds(kind)
        f, t = _window(deps, from_, to)
        report = cost_report(deps.store, keys, f, t, kinds=kinds)
        if format == "csv":
            return Response(
                report_to_csv(report),
                media_type="text/csv; charset=utf-8",
                headers={"Content-Disposition": 'attachment; filename="costs.csv"'},
            )
        return render.report_dict(report)

    @r.get("/budgets", summary="Budget status: spent this month, burn rate, forecast, headroom")
    def budgets(request: Request, _: Viewer) -> dict[str, Any]:
        deps = _deps(request)
        return render.budget_dict(budget_status(deps.store, _now(deps)))

    @r.get(
        "/focus.csv",
        summary="FOCUS 1.2 cost export (CSV, streamed) of the ledger rows starting in [from, to)",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/csv": {}}}, 400: {"model": Message}},
    )
    def focus(
        request: Request,
        _: Viewer,
        from_: Annotated[When, Query(alias="from")] = None,
        to: When = None,
        compat: Annotated[
            bool,
            Query(description="Also emit the column names the focus-validator 1.0 rules use."),
        ] = True,
    ) -> StreamingResponse:
        deps = _deps(request)
        f = _ts(from_, "from")
        t = _ts(to, "to")
        if f is not None and t is not None and not t > f:
            raise HTTPException(400, "'to' must be after 'from'")
        opts = FocusOptions(
            controller=deps.focus.controller,
            billing_accounts=deps.focus.billing_accounts,
            compat_1_0=compat,
        )
        body: Iterator[str] = iter_focus_csv(deps.store, f, t, opts)
        return StreamingResponse(
            body,
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="focus.csv"'},
        )

    return r


# --------------------------------------------------------------------------- admin


def _admin_router() -> APIRouter:
    r = APIRouter(tags=["admin"])

    @r.get("/tokens", summary="API tokens (ids, names, roles; never secrets)")
    def tokens(request: Request, _: Admin) -> list[dict[str, Any]]:
        return [
            {
                "token_id": t.token_id,
                "name": t.name,
                "role": t.role,
                "created_at": render.iso(t.created_ts),
                "revoked_at": render.iso(t.revoked_ts),
                "node": t.node,
                "expires_at": render.iso(t.expires_ts),
            }
            for t in _deps(request).store.tokens()
        ]

    @r.delete(
        "/tokens/{token_id}",
        summary="Revoke a token",
        responses={404: {"model": Message}},
    )
    def revoke(
        request: Request, who: Admin, token_id: Annotated[str, Path(max_length=32)]
    ) -> dict[str, Any]:
        deps = _deps(request)
        if not deps.store.revoke_token(token_id, _now(deps)):
            raise HTTPException(404, "no such token")
        log.info("token %s revoked by %s", token_id, who.who)
        return {"token_id": token_id, "revoked": True}

    return r


__all__ = ["ApiDeps", "create_app", "require"]
