"""The HTTP API: `create_app(deps)` builds a FastAPI app around injected parts (`ApiDeps`).

This module only assembles: the edge limits (`edge.py`), the error handlers (`errors.py`), the
metrics registry, the `/v1` routers (`routes/`), the IaC review router and the web console.
Auth is `access.require(role)`; response models are in `schemas/`.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from provisioner.api import edge
from provisioner.api.access import AUTH_RESPONSES, require
from provisioner.api.auth import Role
from provisioner.api.deps import ApiDeps, now_ts
from provisioner.api.errors import install_error_handlers
from provisioner.api.metrics import PassCollector, ProvisionerCollector, make_registry
from provisioner.api.routes.costs import costs_router
from provisioner.api.routes.decisions import decisions_router
from provisioner.api.routes.gpus import gpus_router
from provisioner.api.routes.instances import instances_router
from provisioner.api.routes.meta import meta_router
from provisioner.api.routes.operator import operator_router
from provisioner.api.routes.pools import pools_router
from provisioner.api.routes.status import status_router
from provisioner.api.routes.telemetry import telemetry_router
from provisioner.api.routes.tokens import tokens_router
from provisioner.api.schemas.common import Message
from provisioner.api.telemetry_views import GpuCollector

API_VERSION = "v1"

# Answers of the IaC review its router does not document: the app's auth, and the render
# limiter's 429 (with Retry-After) for too many uncached reviews.
IAC_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    429: {"model": Message, "description": "Too many uncached IaC reviews; see Retry-After"},
}


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
    install_error_handlers(app)

    registry = make_registry(ProvisionerCollector(deps.store, lambda: now_ts(deps), deps.snapshot))
    registry.register(GpuCollector(deps))
    if deps.status_extra is not None:
        registry.register(PassCollector(deps.status_extra))
    app.include_router(meta_router(registry, metrics_public=deps.metrics_public))

    prefix = f"/{API_VERSION}"
    for router in (
        status_router(),
        pools_router(),
        instances_router(),
        decisions_router(),
        operator_router(),
        telemetry_router(),
        costs_router(),
        tokens_router(),
        gpus_router(),
    ):
        app.include_router(router, prefix=prefix)
    # IaC reviews (provisioner/iac): GET /v1/iac/review, viewer role. Imported here, not at the
    # top, so the API module does not load the IaC package until an app is built.
    from provisioner.iac.api import iac_router

    app.include_router(
        iac_router(dependencies=[Depends(require(Role.VIEWER))]),
        prefix=prefix,
        responses=IAC_RESPONSES,
    )
    # The web console (pages at `/`, sign-in, operator forms), imported late for the same reason.
    from provisioner.api.console.app import mount_console

    mount_console(app)
    return app


# `ApiDeps` and `require` are imported from here by the controller, tests and the console.
__all__ = ["API_VERSION", "ApiDeps", "create_app", "require"]
