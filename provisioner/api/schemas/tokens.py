"""API tokens as the admin sees them: ids, names, roles, never secrets."""

from __future__ import annotations

from provisioner.api.schemas.common import IsoTime, Out


class TokenOut(Out):
    token_id: str
    name: str
    role: str
    created_at: IsoTime | None
    revoked_at: IsoTime | None
    node: str | None
    expires_at: IsoTime | None


class RevokedOut(Out):
    token_id: str
    revoked: bool


__all__ = ["RevokedOut", "TokenOut"]
