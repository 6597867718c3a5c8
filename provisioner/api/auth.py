"""Bearer-token auth with four roles, agent < viewer < operator < admin.

A token reads `pbt_<id>_<secret>`. The store keeps the id, the role and an HMAC-SHA256 of the
secret keyed by a per-token random salt; the secret itself is shown once, when it is created,
and never stored, logged or returned again. Comparison is constant-time.

An `agent` token is bound to one node and may only push that node's telemetry: it reads
nothing and switches nothing, so a stolen agent token can neither pause bursting nor fake
another node's load. Any token may carry an expiry; expired and revoked tokens answer 401.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import IntEnum

from provisioner.domain.errors import InvalidArgument
from provisioner.domain.records import TokenRecord
from provisioner.ports.store import TokenRepo

PREFIX = "pbt"
_TOKEN_RE = re.compile(r"^pbt_([0-9a-f]{12})_([A-Za-z0-9_-]{20,128})$")


class Role(IntEnum):
    AGENT = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise InvalidArgument(
                f"unknown role {text!r}; use agent, viewer, operator or admin"
            ) from None

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Principal:
    token_id: str
    name: str
    role: Role
    node: str | None = None  # agent tokens: the one node whose telemetry they may push

    @property
    def who(self) -> str:
        """How the principal appears in audit fields: name and token id, never the secret."""
        return f"{self.name or 'token'} ({self.token_id})"


def _digest(salt: str, secret: str) -> str:
    return hmac.new(salt.encode(), secret.encode(), hashlib.sha256).hexdigest()


def create_token(
    store: TokenRepo,
    role: Role | str,
    name: str,
    now_ts: float,
    *,
    node: str | None = None,
    ttl_s: float | None = None,
) -> str:
    """Create a token and return it. This is the only time the secret exists in clear.

    `node` binds the token to one node; an agent token needs one, other roles take none.
    `ttl_s`: the token stops working that many seconds after `now_ts` (None: never)."""
    r = role if isinstance(role, Role) else Role.parse(role)
    if r is Role.AGENT and not node:
        raise InvalidArgument("an agent token must be bound to a node (--node)")
    if r is not Role.AGENT and node:
        raise InvalidArgument("only agent tokens are bound to a node")
    if ttl_s is not None and not (ttl_s > 0 and ttl_s < 100 * 365 * 86_400.0):
        raise InvalidArgument("ttl must be positive and under 100 years")
    token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    store.add_token(
        TokenRecord(
            token_id=token_id,
            name=name[:128],
            role=r.label,
            salt=salt,
            secret_hash=_digest(salt, secret),
            created_ts=now_ts,
            node=node or None,
            expires_ts=now_ts + ttl_s if ttl_s is not None else None,
        )
    )
    return f"{PREFIX}_{token_id}_{secret}"


def verify_token(store: TokenRepo, presented: str, now_ts: float) -> Principal | None:
    """The principal a presented token stands for at `now_ts`, or None (malformed, unknown,
    revoked, expired)."""
    m = _TOKEN_RE.match(presented.strip())
    if m is None:
        return None
    token_id, secret = m.group(1), m.group(2)
    rec = store.token(token_id)
    if rec is None or rec.revoked_ts is not None:
        return None
    if rec.expires_ts is not None and now_ts >= rec.expires_ts:
        return None
    if not hmac.compare_digest(_digest(rec.salt, secret), rec.secret_hash):
        return None
    try:
        role = Role.parse(rec.role)
    except ValueError:
        return None
    if role is Role.AGENT and not rec.node:
        return None  # an agent token bound to nothing may push nothing
    return Principal(rec.token_id, rec.name, role, rec.node if role is Role.AGENT else None)
