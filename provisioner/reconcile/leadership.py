"""Leadership among controllers that share one store: one leads (plans and acts), the others
stand by (serve the read API) until the lease lapses.

`ensure()` runs before every pass. It takes or renews the lease (store_lease.py) and points
the store's fence at the token it holds. From its first `ensure()` on, a controller that does not
lead keeps the fence at its last (stale) token, never at None, so nothing it writes that acts
on the world can commit.
A database that cannot be reached means "not leading": the pass is skipped, and whoever holds
a live lease once it is back leads.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from provisioner.domain.errors import InvalidArgument
from provisioner.domain.records import Fence, Lease
from provisioner.ports.store import LeaderLease

log = logging.getLogger("provisioner.leadership")


def default_holder_id() -> str:
    """host:pid:random, unique per process: a restarted controller is a new holder, and waits
    for its predecessor's lease to lapse rather than inheriting writes in flight."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class LeaderView:
    """Who leads, as one controller last saw it (for /v1/status and the metrics)."""

    me: str
    leading: bool
    leader: str
    token: int
    expires_ts: float
    fenced_writes_refused: int
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": "leader" if self.leading else "standby",
            "holder_id": self.me,
            "leader": self.leader,
            "token": self.token,
            "expires_ts": self.expires_ts,
            "fenced_writes_refused": self.fenced_writes_refused,
            **({"error": self.error} if self.error else {}),
        }


class Leadership:
    def __init__(
        self,
        store: LeaderLease,
        name: str,
        *,
        ttl_s: float = 30.0,
        holder: str | None = None,
    ) -> None:
        if ttl_s <= 0:
            raise InvalidArgument(f"lease ttl must be positive, not {ttl_s}")
        self.store = store
        self.name = name
        self.ttl_s = ttl_s
        self.me = holder or default_holder_id()
        self.token = 0
        self.leading = False
        self._last: Lease | None = None
        self._error = ""

    def ensure(self) -> bool:
        """Take or renew the lease; True when this controller leads for the coming pass."""
        try:
            lease = self.store.acquire_lease(self.name, self.me, self.ttl_s)
        except SQLAlchemyError as exc:
            self._error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            if self.leading:
                log.warning("cannot renew the lease (%s): standing by", self._error)
            self.leading = False
            self.store.fence = Fence(self.name, self.me, self.token, self.ttl_s)
            return False
        self._error = ""
        self._last = lease
        leading = lease.holder == self.me
        if leading and (not self.leading or lease.token != self.token):
            log.warning("leading as %s (token %d)", self.me, lease.token)
        elif not leading and self.leading:
            log.warning("lost the lease to %s (token %d): standing by", lease.holder, lease.token)
        if leading:
            self.token = lease.token
        self.leading = leading
        self.store.fence = Fence(self.name, self.me, self.token, self.ttl_s)
        return leading

    def release(self) -> None:
        """On a clean stop: hand the lease back so a standby takes over at its next tick."""
        if not self.leading:
            return
        self.leading = False
        try:
            self.store.release_lease(self.name, self.me, self.token)
        except SQLAlchemyError:
            log.warning("could not release the lease; it lapses in %.0fs", self.ttl_s)

    def view(self) -> LeaderView:
        last = self._last
        return LeaderView(
            me=self.me,
            leading=self.leading,
            leader=last.holder if last is not None else "",
            token=last.token if last is not None else 0,
            expires_ts=last.expires_ts if last is not None else 0.0,
            fenced_writes_refused=last.refused if last is not None else 0,
            error=self._error,
        )
