"""Cloud instances with their lifecycle history (viewer)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request

from provisioner.api import render
from provisioner.api.access import AUTH_RESPONSES, Viewer
from provisioner.api.deps import deps_of
from provisioner.api.params import Limit, Offset
from provisioner.api.schemas.common import Message
from provisioner.api.schemas.inventory import InstanceOut
from provisioner.domain.instances import InstanceState


def instances_router() -> APIRouter:
    r = APIRouter(tags=["instances"], responses=AUTH_RESPONSES)

    @r.get(
        "/instances",
        summary="Cloud instances with their history",
        response_model=list[InstanceOut],
    )
    def instances(
        request: Request,
        _: Viewer,
        state: Annotated[InstanceState | None, Query(description="Only this state.")] = None,
        pool: Annotated[str | None, Query(max_length=64)] = None,
        live: Annotated[bool, Query(description="Only instances not yet ended.")] = False,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> list[dict[str, Any]]:
        rows = deps_of(request).store.instances(
            states=[state] if state is not None else None,
            pool=pool,
            live_only=live,
            limit=limit,
            offset=offset,
        )
        return [render.instance_dict(si) for si in rows]

    @r.get(
        "/instances/{instance_id}",
        summary="One instance with its lifecycle history",
        response_model=InstanceOut,
        responses={404: {"model": Message}},
    )
    def instance(
        request: Request, _: Viewer, instance_id: Annotated[str, Path(max_length=128)]
    ) -> dict[str, Any]:
        si = deps_of(request).store.instance(instance_id)
        if si is None:
            raise HTTPException(404, "no such instance")
        return render.instance_dict(si)

    return r


__all__ = ["instances_router"]
