"""API tokens (admin): list them (never a secret) and revoke one."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request

from provisioner.api import render
from provisioner.api.access import AUTH_RESPONSES, Admin
from provisioner.api.deps import deps_of, now_ts
from provisioner.api.schemas.common import Message
from provisioner.api.schemas.tokens import RevokedOut, TokenOut

log = logging.getLogger("provisioner.api")


def tokens_router() -> APIRouter:
    r = APIRouter(tags=["admin"], responses=AUTH_RESPONSES)

    @r.get(
        "/tokens",
        summary="API tokens (ids, names, roles; never secrets)",
        response_model=list[TokenOut],
    )
    def tokens(request: Request, _: Admin) -> list[dict[str, Any]]:
        return [
            {
                "token_id": t.token_id,
                "name": t.name,
                "role": t.role,
                "created_at": render.iso(t.created_ts),
                "revoked_at": render.iso(t.revoked_ts),
                "node": t.node,
                "expires_at": render.iso(t.expires_ts),
            }
            for t in deps_of(request).store.tokens()
        ]

    @r.delete(
        "/tokens/{token_id}",
        summary="Revoke a token",
        response_model=RevokedOut,
        responses={404: {"model": Message}},
    )
    def revoke(
        request: Request, who: Admin, token_id: Annotated[str, Path(max_length=32)]
    ) -> dict[str, Any]:
        deps = deps_of(request)
        if not deps.store.revoke_token(token_id, now_ts(deps)):
            raise HTTPException(404, "no such token")
        log.info("token %s revoked by %s", token_id, who.who)
        return {"token_id": token_id, "revoked": True}

    return r


__all__ = ["tokens_router"]
