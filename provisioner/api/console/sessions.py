"""Console sign-in sessions: a bearer token is exchanged once for a random session id, kept in
an HttpOnly, SameSite=Strict cookie; the token never travels again and never sits in a URL.

Sessions live in memory (a restart signs everyone out, which is fine for a console) and expire
after `ttl_s` of wall time. Wall time, not the controller's clock: the demo's clock runs hundreds
of times faster than real time, and a session's life is a security matter, not a simulated one.
Each session carries its own CSRF token, which every form posts back (synchronizer pattern).
Every request re-reads the token record, so revoking the token ends its sessions at once.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from provisioner.api.auth import Principal, Role
from provisioner.ports.store import TokenRepo

COOKIE = "pbc_session"
DEFAULT_TTL_S = 12 * 3600.0
# Sessions one token may hold at once: its 21st sign-in ends its own oldest session, never
# another token's (a global cap, oldest first, let 10,000 viewer sign-ins sign the operator
# out). Tokens are made by admins, so the table stays bounded by tokens x this.
MAX_SESSIONS_PER_TOKEN = 20


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str
    principal: Principal
    csrf: str
    expires_at: float


class Sessions:
    def __init__(
        self, ttl_s: float = DEFAULT_TTL_S, wall: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self._wall = wall
        self._lock = threading.Lock()
        self._items: dict[str, Session] = {}

    def open(self, principal: Principal) -> Session:
        now = self._wall()
        s = Session(
            session_id=secrets.token_urlsafe(32),
            principal=principal,
            csrf=secrets.token_urlsafe(32),
            expires_at=now + self.ttl_s,
        )
        with self._lock:
            self._drop_expired(now)
            mine = [x for x in self._items.values() if x.principal.token_id == principal.token_id]
            if len(mine) >= MAX_SESSIONS_PER_TOKEN:
                oldest = min(mine, key=lambda x: x.expires_at)
                del self._items[oldest.session_id]
            self._items[s.session_id] = s
        return s

    def get(
        self, session_id: str | None, store: TokenRepo, *, now_ts: float | None = None
    ) -> Session | None:
        """The live session for a cookie value, or None (unknown, expired, token revoked, or
        token past its expiry at `now_ts`, the controller's clock)."""
        if not session_id:
            return None
        with self._lock:
            s = self._items.get(session_id)
            if s is None:
                return None
            if s.expires_at <= self._wall():
                del self._items[session_id]
                return None
        rec = store.token(s.principal.token_id)
        if rec is None or rec.revoked_ts is not None or _expired(rec.expires_ts, now_ts):
            self.close(session_id)
            return None
        return s

    def close(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._items.pop(session_id, None)

    def _drop_expired(self, now: float) -> None:
        for sid in [k for k, v in self._items.items() if v.expires_at <= now]:
            del self._items[sid]


def csrf_ok(session: Session, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(session.csrf, presented or "")


def can_operate(session: Session | None) -> bool:
    return session is not None and session.principal.role >= Role.OPERATOR


def _expired(expires_ts: float | None, now_ts: float | None) -> bool:
    return expires_ts is not None and now_ts is not None and now_ts >= expires_ts
