"""Planner decisions (viewer) and the dry-run plan (operator)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request

from provisioner.api import render
from provisioner.api.access import AUTH_RESPONSES, Operator, Viewer
from provisioner.api.deps import deps_of
from provisioner.api.params import Limit, Offset, When, span
from provisioner.api.schemas.common import Message
from provisioner.api.schemas.decisions import PlanOut, StoredDecisionOut


def decisions_router() -> APIRouter:
    r = APIRouter(tags=["decisions"], responses=AUTH_RESPONSES)

    @r.get(
        "/decisions",
        summary="Planner decisions, newest first",
        response_model=list[StoredDecisionOut],
        responses={400: {"model": Message}},
    )
    def decisions(
        request: Request,
        _: Viewer,
        reason: Annotated[str | None, Query(max_length=64)] = None,
        from_: Annotated[When, Query(alias="from")] = None,
        to: When = None,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> list[dict[str, Any]]:
        f, t = span(from_, to)
        rows = deps_of(request).store.decisions(
            from_ts=f, to_ts=t, reason=reason, limit=limit, offset=offset
        )
        return [render.decision_dict(d) for d in rows]

    @r.get(
        "/decisions/{decision_id}",
        summary="One decision: reasons, alternatives, IaC review",
        response_model=StoredDecisionOut,
        responses={404: {"model": Message}},
    )
    def decision(
        request: Request, _: Viewer, decision_id: Annotated[str, Path(max_length=64)]
    ) -> dict[str, Any]:
        d = deps_of(request).store.decision(decision_id)
        if d is None:
            raise HTTPException(404, "no such decision")
        return render.decision_dict(d)

    @r.post(
        "/plan",
        summary="Dry run: the plan the controller would make now (nothing is acted on)",
        response_model=PlanOut,
        responses={503: {"model": Message}},
    )
    def plan(request: Request, _: Operator) -> dict[str, Any]:
        deps = deps_of(request)
        if deps.planner is None:
            raise HTTPException(503, "no planner is wired into this API")
        return render.plan_dict(deps.planner())

    return r


__all__ = ["decisions_router"]
