"""The leader lease and fencing: which controller may act, and the store's refusal of a write
from one that may not.

A lease is a row (`leader_lease`, one per controller name) with a holder, an expiry and a
fencing token. Taking the lease from another holder (or after it expired) raises the token by
one; renewing it keeps the token. Expiry is judged by the database's clock, so controllers on
hosts whose clocks disagree still agree on who leads (tests inject `lease_clock` instead).

Fencing: when `fence` is set (a controller in HA mode), every write that acts on the world
(intents, instances and their lifecycle, decisions, job usage, ledger rows and watermarks)
runs in `fenced_transaction()`, which locks the lease row and refuses the whole transaction
with `FencedOut` unless the fence's token is the current one and the lease has not expired.
Taking the lease waits for that lock, so a write either commits while its writer still leads
or is refused: a leader paused past its lease (SIGSTOP, a long GC, a lost network) that wakes
up cannot write. Cloud and Slurm calls are preceded by `check_fence()` (which also renews).

The behaviour each method promises is written on its port,
`provisioner.ports.store.LeaderLease`; the `Lease` and `Fence` values are domain records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from provisioner.domain.records import Fence, Lease
from provisioner.ports.store import FencedOut, LeaderLease, StoreError
from provisioner.store.engine import StoreBase
from provisioner.store.models import LeaderLeaseRow

log = logging.getLogger("provisioner.lease")


def _lease(row: LeaderLeaseRow) -> Lease:
    return Lease(
        name=row.name,
        holder=row.holder,
        token=int(row.token),
        acquired_ts=float(row.acquired_ts),
        renewed_ts=float(row.renewed_ts),
        expires_ts=float(row.expires_ts),
        refused=int(row.refused or 0),
    )


_DB_NOW = {
    "postgresql": "SELECT extract(epoch FROM clock_timestamp())::float8",
    "sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0",
}


class LeaseStore(StoreBase, LeaderLease):
    # Tests inject the lease's clock; None: the database's clock.
    lease_clock: Callable[[], float] | None = None

    def db_now(self) -> float:
        with self.reading() as s:
            return self._lease_now(s)

    def _lease_now(self, s: Session) -> float:
        if self.lease_clock is not None:
            return self.lease_clock()
        sql = _DB_NOW.get(self.dialect)
        if sql is None:
            raise StoreError(f"leases need PostgreSQL or SQLite, not {self.dialect}")
        return float(s.execute(text(sql)).scalar_one())

    # ------------------------------------------------------------------ the lease

    def acquire_lease(self, name: str, holder: str, ttl_s: float) -> Lease:
        if ttl_s <= 0:
            raise StoreError(f"lease ttl must be positive, not {ttl_s}")
        try:
            with self.transaction() as s:
                now = self._lease_now(s)
                row = s.get(LeaderLeaseRow, name, with_for_update=True)
                if row is None:
                    row = LeaderLeaseRow(
                        name=name,
                        holder=holder,
                        token=1,
                        acquired_ts=now,
                        renewed_ts=now,
                        expires_ts=now + ttl_s,
                        refused=0,
                    )
                    s.add(row)
                elif row.holder == holder and row.expires_ts > now:
                    row.renewed_ts = now
                    row.expires_ts = now + ttl_s
                elif row.expires_ts <= now or not row.holder:
                    # A new term, even for the same holder: writes of the lapsed one are refused.
                    row.holder = holder
                    row.token = int(row.token) + 1
                    row.acquired_ts = now
                    row.renewed_ts = now
                    row.expires_ts = now + ttl_s
                s.flush()
                return _lease(row)
        except IntegrityError:
            # Two first-ever acquisitions raced on PostgreSQL: the other one inserted the row.
            current = self.lease(name)
            if current is None:
                raise
            return current

    def release_lease(self, name: str, holder: str, token: int) -> bool:
        with self.transaction() as s:
            row = s.get(LeaderLeaseRow, name, with_for_update=True)
            if row is None or row.holder != holder or int(row.token) != token:
                return False
            now = self._lease_now(s)
            row.renewed_ts = now
            row.expires_ts = min(float(row.expires_ts), now)
            return True

    def lease(self, name: str) -> Lease | None:
        with self.reading() as s:
            row = s.get(LeaderLeaseRow, name)
            return _lease(row) if row is not None else None

    # ------------------------------------------------------------------ fencing

    def check_fence(self) -> None:
        # A fenced transaction that writes nothing but the renewal: the refusal, and its count,
        # are fenced_transaction's.
        fence = self.fence
        if fence is None:
            return
        with self.fenced_transaction() as s:
            # The row and the time the check just read (the row is in the session, locked).
            row = s.get(LeaderLeaseRow, fence.name)
            now = s.info["lease_now"]
            if row is not None:
                row.renewed_ts = now
                row.expires_ts = max(float(row.expires_ts), now + fence.ttl_s)

    def _check_fence_in(self, s: Session, fence: Fence) -> None:
        # FOR SHARE: fenced writes of one leader do not queue behind each other, but a takeover
        # (FOR UPDATE in acquire_lease) waits for them, and they wait for a takeover.
        row = s.get(LeaderLeaseRow, fence.name, with_for_update={"read": True})
        now = s.info["lease_now"] = self._lease_now(s)
        if row is None or row.holder != fence.holder or int(row.token) != fence.token:
            leader = f"{row.holder} (token {row.token})" if row is not None else "nobody"
            raise FencedOut(
                f"write refused: fencing token {fence.token} of {fence.holder} is stale; "
                f"the lease {fence.name!r} is held by {leader}"
            )
        if row.expires_ts <= now:
            raise FencedOut(
                f"write refused: the lease {fence.name!r} of {fence.holder} (token "
                f"{fence.token}) expired {now - row.expires_ts:.1f}s ago"
            )

    def _count_refusal(self, fence: Fence | None, refused: FencedOut) -> None:
        log.warning("%s", refused)
        if fence is None:
            return
        try:
            with self.transaction() as s:
                s.execute(
                    update(LeaderLeaseRow)
                    .where(LeaderLeaseRow.name == fence.name)
                    .values(refused=LeaderLeaseRow.refused + 1)
                )
        except Exception:  # the count is for the operator; the refusal itself stands
            log.debug("could not count a refused write", exc_info=True)
