"""`POST /v1/telemetry` (an agent for its own node, or operator) and `GET /v1/telemetry`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Query, Request

from provisioner.api import render
from provisioner.api.access import AUTH_RESPONSES, Agent, Viewer
from provisioner.api.auth import Role
from provisioner.api.deps import deps_of
from provisioner.api.schemas.common import UNREADABLE_BODY
from provisioner.api.schemas.telemetry import IngestOut, NodeTelemetryOut
from provisioner.api.telemetry_ingest import ingest
from provisioner.api.telemetry_views import policy_of
from provisioner.domain.telemetry import GpuTelemetry


def telemetry_router() -> APIRouter:
    r = APIRouter(tags=["telemetry"], responses=AUTH_RESPONSES)

    @r.post(
        "/telemetry",
        summary="Push one node's GPU sample (the NVML agent's payload, schema version 1)",
        status_code=202,
        response_model=IngestOut,
        responses=UNREADABLE_BODY,
    )
    def post_telemetry(
        request: Request, who: Agent, payload: Annotated[GpuTelemetry, Body()]
    ) -> dict[str, Any]:
        deps = deps_of(request)
        if who.role is not Role.AGENT and who.role < Role.OPERATOR:
            raise HTTPException(403, "this needs an agent token for the node, or operator")
        return ingest(deps, who, payload, policy_of(deps).telemetry)

    @r.get(
        "/telemetry",
        summary="Latest GPU samples per node",
        response_model=list[NodeTelemetryOut],
    )
    def get_telemetry(
        request: Request,
        _: Viewer,
        node: Annotated[str | None, Query(max_length=128)] = None,
    ) -> list[dict[str, Any]]:
        return [render.telemetry_dict(t) for t in deps_of(request).store.telemetry(node)]

    return r


__all__ = ["telemetry_router"]
