"""`GET /healthz` (no token) and `GET /metrics` (Prometheus text; viewer unless public)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from provisioner.api.access import AUTH_RESPONSES, require
from provisioner.api.auth import Role
from provisioner.api.schemas.common import Message
from provisioner.api.schemas.meta import HealthOut

# The route's media type is text/plain, which FastAPI would also give its error answers in the
# document; they are JSON, so their content is spelled out.
_JSON_AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {
        "description": answer["description"],
        "content": {"application/json": {"schema": Message.model_json_schema()}},
    }
    for code, answer in AUTH_RESPONSES.items()
}


def meta_router(registry: CollectorRegistry, *, metrics_public: bool) -> APIRouter:
    r = APIRouter(tags=["meta"])

    @r.get("/healthz", summary="Liveness (no token needed)", response_model=HealthOut)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    metrics_auth: list[Any] = [] if metrics_public else [Depends(require(Role.VIEWER))]

    @r.get(
        "/metrics",
        summary="Prometheus metrics (provisioner_*)",
        response_class=PlainTextResponse,
        dependencies=metrics_auth,
        responses={} if metrics_public else _JSON_AUTH_RESPONSES,
    )
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return r


__all__ = ["meta_router"]
