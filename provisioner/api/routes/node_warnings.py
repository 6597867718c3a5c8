"""`POST /v1/nodes/{node}/warnings`: a burst node's watcher reports its cloud's spot warning.

No bearer token: the report is a MUNGE credential, made on the node with the cluster's munge
key (which every Slurm node holds), and decoded by the munged slurmctld uses. munged refuses a
credential made with another key, an expired one and a replay. The credential must come from
root (the watcher), speak for the node in the path, and name the live instance bound to that
node. The pass that acts on it also checks the report came from that instance's own address.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from provisioner.api import render
from provisioner.api.deps import deps_of, now_ts
from provisioner.api.node_claims import bound_instance, root_payload
from provisioner.api.schemas.common import IsoTime, Message, Out
from provisioner.domain.spot_warnings import parse_report


class WarningIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    credential: str = Field(max_length=8192, description="`munge -s <report JSON>` output")


class WarningOut(Out):
    node: str
    instance_id: str
    kind: str
    new: bool = Field(description="False when this warning was already held")
    deadline: IsoTime | None = Field(description="When the VM goes (None: a recommendation)")


REFUSALS: dict[int | str, dict[str, Any]] = {
    400: {"model": Message, "description": "The report is not a valid warning"},
    403: {"model": Message, "description": "The credential or what it names is refused"},
    503: {"model": Message, "description": "This controller takes no warnings (no munged)"},
}


def node_warnings_router() -> APIRouter:
    r = APIRouter(tags=["nodes"], responses=REFUSALS)

    @r.post(
        "/nodes/{node}/warnings",
        summary="A burst node's spot warning (interruption, rebalance, preemption)",
        status_code=202,
        response_model=WarningOut,
    )
    def post_warning(request: Request, node: str, body: WarningIn) -> dict[str, Any]:
        deps = deps_of(request)
        if deps.spot_inbox is None:
            raise HTTPException(503, "this controller takes no spot warnings: no munged set")
        payload = root_payload(deps, body.credential, "spot warnings")
        source = request.client.host if request.client else ""
        warning = parse_report(payload, noticed_ts=now_ts(deps), source=source)
        bound_instance(deps, node, warning.node, warning.instance_id)
        new = deps.spot_inbox.post(warning)
        deadline = warning.deadline_ts()
        return {
            "node": node,
            "instance_id": warning.instance_id,
            "kind": warning.kind.value,
            "new": new,
            "deadline": render.iso(deadline) if deadline is not None else None,
        }

    return r


__all__ = ["node_warnings_router"]
