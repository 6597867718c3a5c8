"""`GET /v1/status`: operator switches, instances by state, $/h, pending intents, snapshot."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from provisioner.api import render
from provisioner.api.access import AUTH_RESPONSES, Viewer
from provisioner.api.deps import deps_of, now_ts
from provisioner.api.schemas.status import StatusOut
from provisioner.domain.instances import InstanceState


def status_router() -> APIRouter:
    r = APIRouter(responses=AUTH_RESPONSES)

    # exclude_unset: `snapshot` and `controller` are left out, not null, when not wired in.
    @r.get(
        "/status",
        tags=["status"],
        summary="Controller status",
        response_model=StatusOut,
        response_model_exclude_unset=True,
    )
    def status(request: Request, _: Viewer) -> dict[str, Any]:
        deps = deps_of(request)
        store = deps.store
        counts = store.instance_counts()
        out: dict[str, Any] = {
            "now": render.iso(now_ts(deps)),
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

    return r


__all__ = ["status_router"]
