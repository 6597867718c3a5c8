"""Operator switches: pause / resume bursting, approve a held orphan sweep (operator), and
`GET /v1/operator` (viewer). Each action answers the switches as they now stand."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ConfigDict, Field

from provisioner.api import render
from provisioner.api.access import AUTH_RESPONSES, Operator, Viewer
from provisioner.api.deps import deps_of, now_ts
from provisioner.api.schemas.common import UNREADABLE_BODY
from provisioner.api.schemas.operator import OperatorOut

log = logging.getLogger("provisioner.api")


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="", max_length=500)


def operator_router() -> APIRouter:
    r = APIRouter(tags=["operator"], responses=AUTH_RESPONSES)

    @r.post(
        "/operator/pause",
        summary="Pause bursting (no new scale-ups)",
        response_model=OperatorOut,
        responses=UNREADABLE_BODY,
    )
    def pause(
        request: Request,
        who: Operator,
        body: Annotated[PauseBody | None, Body()] = None,
    ) -> dict[str, Any]:
        deps = deps_of(request)
        reason = body.reason if body is not None else ""
        deps.store.set_paused(True, now_ts(deps), by=who.who, reason=reason)
        log.info("bursting paused by %s", who.who)
        return render.operator_dict(deps.store.operator_state())

    @r.post("/operator/resume", summary="Resume bursting", response_model=OperatorOut)
    def resume(request: Request, who: Operator) -> dict[str, Any]:
        deps = deps_of(request)
        deps.store.set_paused(False, now_ts(deps), by=who.who)
        log.info("bursting resumed by %s", who.who)
        return render.operator_dict(deps.store.operator_state())

    @r.post(
        "/operator/sweep/approve",
        summary="Let the orphan sweep held by its safety valve go ahead",
        response_model=OperatorOut,
    )
    def approve_sweep(request: Request, who: Operator) -> dict[str, Any]:
        deps = deps_of(request)
        deps.store.approve_sweep(now_ts(deps), by=who.who)
        log.warning("orphan sweep approved by %s", who.who)
        return render.operator_dict(deps.store.operator_state())

    @r.get("/operator", summary="Operator switches", response_model=OperatorOut)
    def operator_state(request: Request, _: Viewer) -> dict[str, Any]:
        return render.operator_dict(deps_of(request).store.operator_state())

    return r


__all__ = ["PauseBody", "operator_router"]
