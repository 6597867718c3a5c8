"""`POST /v1/nodes/{node}/agent-token`: a burst node's GPU agent gets its token from the node's
own proof, never from user-data (which whoever may describe the instance can read).

The node's join program asks once munged runs: a MUNGE credential made as root with the
cluster's key (node_claims.py), whose payload names the node, the instance and this purpose
(a credential made for another endpoint is refused here). The instance must be live and bound
to that node, and the request must come from the node's own address: Slurm's NodeAddr, which
the controller set from the cloud's answer for that instance. The token is an agent token bound
to the node, named after the instance (`burst-agent:<instance id>`), and ends with it: the
pass revokes the tokens of instances that ended (reconcile/agent_tokens.py). Asking again
replaces the instance's earlier token.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from provisioner.api import render
from provisioner.api.auth import Role, create_token
from provisioner.api.deps import ApiDeps, deps_of, now_ts
from provisioner.api.node_claims import bound_instance, root_payload
from provisioner.api.schemas.common import IsoTime, Message, Out
from provisioner.domain.agent_tokens import AGENT_TOKEN_TTL_S, PURPOSE, agent_token_name

ROUTE = "/nodes/{node}/agent-token"


class AgentTokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    credential: str = Field(max_length=8192, description="`munge -s <request JSON>` output")


class AgentTokenOut(Out):
    node: str
    instance_id: str
    token: str = Field(description="Shown once: the agent's bearer token")
    expires: IsoTime


REFUSALS: dict[int | str, dict[str, Any]] = {
    400: {"model": Message, "description": "The request in the credential is not valid"},
    403: {
        "model": Message,
        "description": "The credential, what it names or its source is refused",
    },
    503: {"model": Message, "description": "This controller takes no such requests (no munged)"},
}


def _request(payload: bytes) -> tuple[str, str]:
    """(node, instance id) of a token request; 400 naming the field that is wrong."""
    try:
        doc = json.loads(payload)
    except ValueError:
        raise HTTPException(400, "credential payload: not JSON") from None
    if not isinstance(doc, dict):
        raise HTTPException(400, "credential payload: not a JSON object")
    if doc.get("purpose") != PURPOSE:
        raise HTTPException(400, f"credential payload.purpose: must be {PURPOSE!r}")
    for key in ("node", "instance_id"):
        if not isinstance(doc.get(key), str) or not doc[key] or len(doc[key]) > 128:
            raise HTTPException(400, f"credential payload.{key}: a non-empty string is needed")
    return str(doc["node"]), str(doc["instance_id"])


def _node_address(deps: ApiDeps, node: str) -> str:
    snap = deps.snapshot() if deps.snapshot else None
    found = next((n for n in snap.nodes if n.name == node), None) if snap else None
    return found.address if found is not None else ""


def node_agent_token_router() -> APIRouter:
    r = APIRouter(tags=["nodes"], responses=REFUSALS)

    @r.post(
        ROUTE,
        summary="A burst node's GPU agent token, for the node's own MUNGE proof",
        status_code=201,
        response_model=AgentTokenOut,
    )
    def post_agent_token(request: Request, node: str, body: AgentTokenIn) -> dict[str, Any]:
        deps = deps_of(request)
        claimed, instance_id = _request(root_payload(deps, body.credential, "agent tokens"))
        bound_instance(deps, node, claimed, instance_id)
        source = request.client.host if request.client else ""
        address = _node_address(deps, node)
        if not address or source != address:
            raise HTTPException(
                403, f"the request came from {source or 'nowhere'}, not {node}'s address "
                f"({address or 'unknown'})"
            )  # fmt: skip
        now = now_ts(deps)
        name = agent_token_name(instance_id)
        for old in deps.store.tokens():
            if old.name == name and old.revoked_ts is None:
                deps.store.revoke_token(old.token_id, now)
        token = create_token(deps.store, Role.AGENT, name, now, node=node, ttl_s=AGENT_TOKEN_TTL_S)
        return {
            "node": node,
            "instance_id": instance_id,
            "token": token,
            "expires": render.iso(now + AGENT_TOKEN_TTL_S),
        }

    return r


__all__ = ["node_agent_token_router"]
