"""`LeaderLease` in memory: leases over a dict, judged and stamped by an injected clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from provisioner.domain.records import Fence, Lease
from provisioner.ports.store import FencedOut, LeaderLease, StoreError


class MemoryLeaderLease(LeaderLease):
    """`LeaderLease` over a dict. `now` is the store's clock (UTC seconds; the SQL store's is
    the database's): every lease is judged by it and stamped with it. A second controller on
    the same store is built `shared_with` the first: the two see one set of leases, each with
    its own `fence` (and its own `now`, normally the same one).

    Differences from SQL: only `check_fence` checks the fence; no other in-memory write is
    fenced (the SQL store refuses every fenced write of a stale leader, see
    `provisioner.ports.store`). No locks: two threads on one instance are not safe."""

    def __init__(
        self, now: Callable[[], float], *, shared_with: MemoryLeaderLease | None = None
    ) -> None:
        self.fence: Fence | None = None
        self._now = now
        self._leases: dict[str, Lease] = shared_with._leases if shared_with is not None else {}

    def db_now(self) -> float:
        return float(self._now())

    # ------------------------------------------------------------------ the lease

    def acquire_lease(self, name: str, holder: str, ttl_s: float) -> Lease:
        if ttl_s <= 0:
            raise StoreError(f"lease ttl must be positive, not {ttl_s}")
        now = self.db_now()
        old = self._leases.get(name)
        if old is None:
            new = Lease(name, holder, 1, now, now, now + ttl_s, 0)
        elif old.holder == holder and old.expires_ts > now:
            new = replace(old, renewed_ts=now, expires_ts=now + ttl_s)
        elif old.expires_ts <= now or not old.holder:
            # A new term, even for the same holder: writes of the lapsed one are refused.
            new = replace(
                old,
                holder=holder,
                token=old.token + 1,
                acquired_ts=now,
                renewed_ts=now,
                expires_ts=now + ttl_s,
            )
        else:
            new = old
        self._leases[name] = new
        return new

    def release_lease(self, name: str, holder: str, token: int) -> bool:
        old = self._leases.get(name)
        if old is None or old.holder != holder or old.token != token:
            return False
        now = self.db_now()
        self._leases[name] = replace(old, renewed_ts=now, expires_ts=min(old.expires_ts, now))
        return True

    def lease(self, name: str) -> Lease | None:
        return self._leases.get(name)

    # ------------------------------------------------------------------ fencing

    def check_fence(self) -> None:
        fence = self.fence
        if fence is None:
            return
        now = self.db_now()
        row = self._leases.get(fence.name)
        if row is None or row.holder != fence.holder or row.token != fence.token:
            leader = f"{row.holder} (token {row.token})" if row is not None else "nobody"
            self._refused(fence)
            raise FencedOut(
                f"write refused: fencing token {fence.token} of {fence.holder} is stale; "
                f"the lease {fence.name!r} is held by {leader}"
            )
        if row.expires_ts <= now:
            self._refused(fence)
            raise FencedOut(
                f"write refused: the lease {fence.name!r} of {fence.holder} (token "
                f"{fence.token}) expired {now - row.expires_ts:.1f}s ago"
            )
        self._leases[fence.name] = replace(
            row, renewed_ts=now, expires_ts=max(row.expires_ts, now + fence.ttl_s)
        )

    def _refused(self, fence: Fence) -> None:
        """Count a refusal on the lease (none: nothing to count), as the SQL store does."""
        row = self._leases.get(fence.name)
        if row is not None:
            self._leases[fence.name] = replace(row, refused=row.refused + 1)
