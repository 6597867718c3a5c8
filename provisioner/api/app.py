"""The HTTP API: `create_app(deps)` builds a FastAPI app around injected parts (`ApiDeps`).

This module only assembles: the edge limits (`edge.py`), the error handlers (`errors.py`), the
metrics registry, the `/v1` routers (`routes/`), the IaC review router, the web console and the
interactive API docs at `/docs`. Auth is `access.require(role)`; response models are in
`schemas/`.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

from provisioner.api import edge
from provisioner.api.access import AUTH_RESPONSES, require
from provisioner.api.auth import Role
from provisioner.api.deps import ApiDeps, now_ts
from provisioner.api.errors import install_error_handlers
from provisioner.api.metrics import PassCollector, ProvisionerCollector, make_registry
from provisioner.api.routes.costs import costs_router
from provisioner.api.routes.decisions import decisions_router
from provisioner.api.routes.efficiency import efficiency_router
from provisioner.api.routes.gpus import gpus_router
from provisioner.api.routes.instances import instances_router
from provisioner.api.routes.jobs import jobs_router
from provisioner.api.routes.meta import meta_router
from provisioner.api.routes.node_agent_token import node_agent_token_router
from provisioner.api.routes.node_warnings import node_warnings_router
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


# Swagger UI for `/docs`, vendored from npm `swagger-ui-dist` beside the console's htmx and
# Chart.js (provisioner/api/console/static/vendor, provenance in docs/console.md): the page loads
# nothing from outside this server, and its CSP forbids it to.
SWAGGER_UI_VERSION = "5.35.0"
SWAGGER_UI_JS = f"/static/vendor/swagger-ui-bundle-{SWAGGER_UI_VERSION}.js"
SWAGGER_UI_CSS = f"/static/vendor/swagger-ui-{SWAGGER_UI_VERSION}.css"
DOCS_FAVICON = "/static/favicon.svg"
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


def docs_page(title: str, openapi_url: str) -> tuple[bytes, dict[str, str]]:
    """The `/docs` page (FastAPI's Swagger UI page, pointed at the vendored files) and its
    headers. The one inline script, which starts Swagger UI, is allowed by its hash."""
    page = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=f"{title}: API docs",
        swagger_js_url=SWAGGER_UI_JS,
        swagger_css_url=SWAGGER_UI_CSS,
        swagger_favicon_url=DOCS_FAVICON,
        oauth2_redirect_url=None,
        # No badge from validator.swagger.io: nothing leaves the machine.
        swagger_ui_parameters={"validatorUrl": None},
    )
    body = bytes(page.body)
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
        for s in _INLINE_SCRIPT.findall(body.decode())
    )
    csp = (
        f"default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; font-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    )
    headers = {
        "Content-Security-Policy": csp,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    return body, headers


def create_app(deps: ApiDeps) -> FastAPI:
    app = FastAPI(
        title=deps.title,
        version=deps.version,
        description="Status, decisions, costs (reports, budgets, FOCUS) and operator actions "
        "of the hybrid GPU burst provisioner. All `/v1` endpoints need a bearer token.",
        openapi_url="/openapi.json",
        docs_url=None,  # served below, from the vendored Swagger UI
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
        jobs_router(),
        operator_router(),
        telemetry_router(),
        costs_router(),
        efficiency_router(),
        tokens_router(),
        gpus_router(),
        node_warnings_router(),
        node_agent_token_router(),
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

    # The interactive API docs: public, like the OpenAPI document they render (no data; every
    # call made from the page needs a token, entered with "Authorize").
    docs_body, docs_headers = docs_page(deps.title, "/openapi.json")

    @app.get("/docs", include_in_schema=False)
    def api_docs() -> HTMLResponse:
        return HTMLResponse(docs_body, headers=docs_headers)

    return app


# `ApiDeps` and `require` are imported from here by the controller, tests and the console.
__all__ = ["API_VERSION", "ApiDeps", "create_app", "require"]
