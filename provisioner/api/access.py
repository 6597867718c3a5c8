"""Who may call a route: the bearer-token dependency `require(role)` and its aliases.

Tokens and roles themselves live in `auth.py`; this module only turns a request's
`Authorization` header into a `Principal` (401 without a valid token, 403 below the role).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from provisioner.api.auth import Principal, Role, verify_token
from provisioner.api.deps import deps_of, now_ts
from provisioner.api.schemas.common import Message

_bearer = HTTPBearer(
    auto_error=False,
    description="API token: `Authorization: Bearer pbt_<id>_<secret>` "
    "(roles viewer < operator < admin).",
)

# Documented on every token-protected router, so the OpenAPI document names both answers.
AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": Message, "description": "No token, or an invalid, expired or revoked one"},
    403: {"model": Message, "description": "The token's role is too low for this"},
}


def require(role: Role) -> Callable[..., Principal]:
    """A dependency: the caller's principal, with at least `role`; 401 or 403 otherwise."""

    def dependency(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        if creds is None or not creds.credentials:
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        deps = deps_of(request)
        principal = verify_token(deps.store, creds.credentials, now_ts(deps))
        if principal is None:
            raise HTTPException(
                401, "invalid, expired or revoked token", headers={"WWW-Authenticate": "Bearer"}
            )
        if principal.role < role:
            raise HTTPException(
                403, f"this needs the {role.label} role; the token has {principal.role.label}"
            )
        request.state.principal = principal
        return principal

    dependency.__name__ = f"require_{role.label}"
    return dependency


Agent = Annotated[Principal, Depends(require(Role.AGENT))]
Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
Admin = Annotated[Principal, Depends(require(Role.ADMIN))]

__all__ = ["AUTH_RESPONSES", "Admin", "Agent", "Operator", "Viewer", "require"]
