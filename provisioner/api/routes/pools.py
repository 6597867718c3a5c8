"""Burst pools: `GET /v1/pools` (viewer) and drain / undrain (operator)."""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request

from provisioner.api import render
from provisioner.api.access import AUTH_RESPONSES, Operator, Viewer
from provisioner.api.auth import Principal
from provisioner.api.deps import deps_of, now_ts
from provisioner.api.schemas.common import Message
from provisioner.api.schemas.inventory import PoolOut

log = logging.getLogger("provisioner.api")

PoolName = Annotated[str, Path(max_length=64)]


def pools_router() -> APIRouter:
    r = APIRouter(responses=AUTH_RESPONSES)

    @r.get(
        "/pools",
        tags=["pools"],
        summary="Burst pools, with drain flags and $/h",
        response_model=list[PoolOut],
    )
    def pools(request: Request, _: Viewer) -> list[dict[str, Any]]:
        store = deps_of(request).store
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

    def _drain(request: Request, who: Principal, name: str, drained: bool) -> dict[str, Any]:
        deps = deps_of(request)
        p = deps.store.set_pool_drained(name, drained, now_ts(deps), by=who.who)
        if p is None:
            raise HTTPException(404, "no such pool")
        log.info("pool %s %s by %s", name, "drained" if drained else "undrained", who.who)
        return render.pool_dict(p)

    @r.post(
        "/pools/{name}/drain",
        tags=["operator"],
        summary="Drain a pool: no new nodes; its nodes are drained and removed",
        response_model=PoolOut,
        responses={404: {"model": Message}},
    )
    def drain(request: Request, who: Operator, name: PoolName) -> dict[str, Any]:
        return _drain(request, who, name, True)

    @r.post(
        "/pools/{name}/undrain",
        tags=["operator"],
        summary="Undo a drain",
        response_model=PoolOut,
        responses={404: {"model": Message}},
    )
    def undrain(request: Request, who: Operator, name: PoolName) -> dict[str, Any]:
        return _drain(request, who, name, False)

    return r


__all__ = ["pools_router"]
