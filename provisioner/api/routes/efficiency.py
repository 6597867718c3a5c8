"""GPU efficiency and waste (viewer): `GET /v1/efficiency`, per team, project, pool or node.

Definitions: `account/efficiency.py` and docs/console.md, "Efficiency and waste". Bad
parameters raise `ReportError`: a 400 via `api/errors.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request

from provisioner.account.efficiency import efficiency, efficiency_dict, efficiency_rows
from provisioner.account.known import check_window
from provisioner.api import render
from provisioner.api.access import AUTH_RESPONSES, Viewer
from provisioner.api.deps import deps_of
from provisioner.api.params import When, window
from provisioner.api.schemas.common import Message
from provisioner.api.schemas.efficiency import EfficiencyOut


def efficiency_body(store: Any, group_by: str, f: float, t: float) -> dict[str, Any]:
    rows, total = efficiency(store, group_by, f, t)
    return {
        "from": render.iso(f),
        "to": render.iso(t),
        "group_by": group_by,
        "currency": "USD",
        "rows": efficiency_rows(rows),
        "total": efficiency_dict(total),
    }


def efficiency_router() -> APIRouter:
    r = APIRouter(tags=["costs"], responses=AUTH_RESPONSES)

    @r.get(
        "/efficiency",
        summary="GPU-hours paid and used (NVML), efficiency, idle and never-ran dollars, per "
        "team, project, pool or node over [from, to)",
        response_model=EfficiencyOut,
        responses={
            400: {"model": Message},
            404: {"model": Message, "description": "The window is wholly outside the ledger"},
            429: {"model": Message, "description": "Too many reports; see Retry-After"},
        },
    )
    def efficiency_report(
        request: Request,
        who: Viewer,
        group_by: Annotated[Literal["team", "project", "pool", "node"], Query()] = "team",
        from_: Annotated[When, Query(alias="from")] = None,
        to: When = None,
    ) -> dict[str, Any]:
        deps = deps_of(request)
        deps.rate_limiter.check("cost reports", who)
        f, t = window(deps, from_, to)
        check_window(deps.store, f, t, deps.clock.now().timestamp())
        return efficiency_body(deps.store, group_by, f, t)

    return r


__all__ = ["efficiency_body", "efficiency_router"]
