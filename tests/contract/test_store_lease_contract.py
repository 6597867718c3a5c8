"""The `LeaderLease` and `Fencing` contracts (`provisioner.ports.store`): taking a lease that is
free, expired or held, the fencing token growing with each new term, renewing, releasing, and
`check_fence` refusing (`FencedOut`, counted) a controller whose term is over. On the in-memory
class (`MemoryLeaderLease`), SQLite and PostgreSQL alike (see test_store_contract.py for how the
engines are chosen). Each test has two controllers on one store: two `Store`s on one database,
or two `MemoryLeaderLease`s sharing their leases.

Two groups:

- On the store's own clock. The SQL store's is the database's, which the test does not control,
  so these tests never depend on time passing: a lease is taken for a huge ttl (it cannot lapse
  during the test) and made free by releasing it, which expires it at once. The memory lease
  gets a clock that stands still.
- On an injected clock, for what depends on time: the expiry, exclusive, at `expires_ts`, and
  the exact stamps. The SQL store takes it through its test seam (`lease_clock`), the memory
  lease through its constructor (`now`).

Where the two differ: the SQL store fences its other writes too (a stale leader's write is
refused whole); the in-memory repositories are separate objects with no fence, so only
`check_fence` refuses (`test_a_stale_leader_s_write`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from test_store_contract import IMPLEMENTATIONS, T0

from provisioner.domain.records import Fence, Lease
from provisioner.ports.store import LeaderLease, RuntimeHistory
from provisioner.store import FencedOut, Store, StoreError
from provisioner.store.memory import MemoryLeaderLease, MemoryRuntimeHistory

NAME = "burst-ctl"
# Longer than any test runs (11.6 days): a lease taken for it does not lapse on its own.
HUGE = 1_000_000.0
TTL = 10.0


class FakeClock:
    """A clock that moves only when the test sets `t`."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class Two:
    """Two controllers' handles on one store's leases, each with its own fence."""

    a: LeaderLease
    b: LeaderLease


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def open_two(
    backend: str, request: pytest.FixtureRequest, clock: FakeClock | None
) -> Iterator[Two]:
    """Two handles; `clock` None: the SQL store's own (the database's) clock, a still one for
    memory."""
    if backend == "memory":
        now = clock or FakeClock()
        a = MemoryLeaderLease(now)
        yield Two(a, MemoryLeaderLease(now, shared_with=a))
        return
    url = request.getfixturevalue("db_url")
    sa, sb = Store(url), Store(url, migrate=False)
    if clock is not None:
        sa.lease_clock = sb.lease_clock = clock
    try:
        yield Two(sa, sb)
    finally:
        sa.close()
        sb.close()


@pytest.fixture
def two(db_backend: str, request: pytest.FixtureRequest) -> Iterator[Two]:
    yield from open_two(db_backend, request, None)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def timed(db_backend: str, request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Two]:
    yield from open_two(db_backend, request, clock)


def _free(two: Two, holder: str = "ctl-a", token: int = 1) -> None:
    """`holder` gives its term `token` up: the lease is free from now on."""
    assert two.a.release_lease(NAME, holder, token)


# ----------------------------------------------------------------------------- the store's clock


def test_a_free_lease_is_taken_with_token_1(two: Two) -> None:
    assert two.a.lease(NAME) is None
    before = two.a.db_now()
    got = two.a.acquire_lease(NAME, "ctl-a", HUGE)
    after = two.a.db_now()
    assert (got.name, got.holder, got.token, got.refused) == (NAME, "ctl-a", 1, 0)
    assert before <= got.acquired_ts <= after
    assert got.renewed_ts == got.acquired_ts
    assert got.expires_ts == got.acquired_ts + HUGE
    assert got.held_by("ctl-a", after)
    # The other controller sees it, and another name is another lease.
    assert two.b.lease(NAME) == got
    assert two.b.lease("other") is None


def test_a_held_lease_is_not_taken(two: Two) -> None:
    held = two.a.acquire_lease(NAME, "ctl-a", HUGE)
    # Nothing changes: the answer is the lease as it stands, the caller does not lead.
    assert two.b.acquire_lease(NAME, "ctl-b", HUGE) == held
    assert two.b.lease(NAME) == held


def test_renewing_keeps_the_token_and_the_term_s_start(two: Two) -> None:
    first = two.a.acquire_lease(NAME, "ctl-a", HUGE)
    again = two.a.acquire_lease(NAME, "ctl-a", 2 * HUGE)
    assert (again.holder, again.token, again.acquired_ts) == ("ctl-a", 1, first.acquired_ts)
    assert again.renewed_ts >= first.renewed_ts
    assert again.expires_ts == again.renewed_ts + 2 * HUGE


def test_a_released_lease_is_taken_by_another_with_the_next_token(two: Two) -> None:
    two.a.acquire_lease(NAME, "ctl-a", HUGE)
    _free(two)
    released = two.b.lease(NAME)
    assert released is not None
    # Released: expired now, holder and token kept.
    assert (released.holder, released.token) == ("ctl-a", 1)
    assert released.expires_ts == released.renewed_ts <= two.b.db_now()
    taken = two.b.acquire_lease(NAME, "ctl-b", HUGE)
    assert (taken.holder, taken.token) == ("ctl-b", 2)
    assert taken.acquired_ts >= released.expires_ts
    assert taken.expires_ts == taken.acquired_ts + HUGE
    assert two.a.lease(NAME) == taken


def test_a_holder_coming_back_after_its_term_ended_starts_a_new_one(two: Two) -> None:
    two.a.acquire_lease(NAME, "ctl-a", HUGE)
    _free(two)
    back = two.a.acquire_lease(NAME, "ctl-a", HUGE)
    assert (back.holder, back.token) == ("ctl-a", 2)


def test_release_is_refused_to_all_but_the_term_s_holder(two: Two) -> None:
    assert not two.a.release_lease(NAME, "ctl-a", 1)  # no such lease
    held = two.a.acquire_lease(NAME, "ctl-a", HUGE)
    assert not two.b.release_lease(NAME, "ctl-b", 1)  # not its holder
    assert not two.a.release_lease(NAME, "ctl-a", 2)  # not its term
    assert two.a.lease(NAME) == held


def test_a_ttl_must_be_positive(two: Two) -> None:
    for ttl in (0.0, -1.0):
        with pytest.raises(StoreError):
            two.a.acquire_lease(NAME, "ctl-a", ttl)
    assert two.a.lease(NAME) is None


def test_without_a_fence_there_is_nothing_to_check(two: Two) -> None:
    assert two.a.fence is None
    two.a.check_fence()  # no lease at all: still nothing to check
    held = two.b.acquire_lease(NAME, "ctl-b", HUGE)
    two.a.check_fence()  # another leads: a lone controller does not care
    assert two.a.lease(NAME) == held  # not renewed, no refusal counted


def test_check_fence_passes_at_the_current_term_and_renews(two: Two) -> None:
    held = two.a.acquire_lease(NAME, "ctl-a", HUGE)
    two.a.fence = Fence(NAME, "ctl-a", 1, 2 * HUGE)
    two.a.check_fence()
    renewed = two.a.lease(NAME)
    assert renewed is not None
    assert (renewed.holder, renewed.token, renewed.acquired_ts) == ("ctl-a", 1, held.acquired_ts)
    assert renewed.renewed_ts >= held.renewed_ts
    assert renewed.expires_ts == renewed.renewed_ts + 2 * HUGE
    # A fence with a shorter ttl never brings the expiry closer.
    two.a.fence = Fence(NAME, "ctl-a", 1, 1.0)
    two.a.check_fence()
    again = two.a.lease(NAME)
    assert again is not None and again.expires_ts == renewed.expires_ts


def test_check_fence_refuses_after_another_holder_took_the_lease(two: Two) -> None:
    two.a.acquire_lease(NAME, "ctl-a", HUGE)
    two.a.fence = Fence(NAME, "ctl-a", 1, HUGE)
    _free(two)
    taken = two.b.acquire_lease(NAME, "ctl-b", HUGE)
    with pytest.raises(FencedOut):
        two.a.check_fence()
    with pytest.raises(FencedOut):
        two.a.check_fence()
    now = two.b.lease(NAME)
    assert now is not None
    # Refused twice, counted on the lease; the new holder's term is untouched.
    assert (now.holder, now.token, now.expires_ts, now.refused) == (
        "ctl-b",
        2,
        taken.expires_ts,
        2,
    )
    # The new holder's own fence passes.
    two.b.fence = Fence(NAME, "ctl-b", 2, HUGE)
    two.b.check_fence()


def test_check_fence_refuses_a_term_that_expired(two: Two) -> None:
    two.a.acquire_lease(NAME, "ctl-a", HUGE)
    two.a.fence = Fence(NAME, "ctl-a", 1, HUGE)
    _free(two)  # expired now, though nobody took it: same holder, same token
    released = two.a.lease(NAME)
    with pytest.raises(FencedOut):
        two.a.check_fence()
    after = two.a.lease(NAME)
    assert after is not None and released is not None
    # Not renewed: refusing never revives a lapsed term.
    assert (after.holder, after.token, after.expires_ts) == ("ctl-a", 1, released.expires_ts)
    assert after.refused == 1


def test_check_fence_refuses_a_stale_token_or_a_lease_never_taken(two: Two) -> None:
    two.a.fence = Fence(NAME, "ctl-a", 1, HUGE)
    with pytest.raises(FencedOut):
        two.a.check_fence()  # no lease: nothing to count it on
    assert two.a.lease(NAME) is None
    two.a.acquire_lease(NAME, "ctl-a", HUGE)
    two.a.fence = Fence(NAME, "ctl-a", 0, HUGE)  # a token it never held
    with pytest.raises(FencedOut):
        two.a.check_fence()
    two.a.fence = Fence(NAME, "ctl-x", 1, HUGE)  # the right token, another holder
    with pytest.raises(FencedOut):
        two.a.check_fence()
    got = two.a.lease(NAME)
    assert got is not None and (got.holder, got.token, got.refused) == ("ctl-a", 1, 2)


def test_a_stale_leader_s_write(db_backend: str, request: pytest.FixtureRequest) -> None:
    """SQL: a write that acts on the world (here the runtime history) runs fenced, so a store
    whose fence is stale has it refused whole, with `FencedOut`, counted on the lease.

    Memory differs: its repositories are separate objects that carry no fence, so the same
    write is kept; only `MemoryLeaderLease.check_fence` refuses."""
    history: RuntimeHistory
    stores: list[Store] = []
    if db_backend == "memory":
        mem = MemoryLeaderLease(FakeClock())
        a: LeaderLease = mem
        b: LeaderLease = MemoryLeaderLease(FakeClock(), shared_with=mem)
        history = MemoryRuntimeHistory()
    else:
        url = request.getfixturevalue("db_url")
        sa, sb = Store(url), Store(url, migrate=False)
        stores = [sa, sb]
        a, b, history = sa, sb, sa
    try:
        a.acquire_lease(NAME, "ctl-a", HUGE)
        a.fence = Fence(NAME, "ctl-a", 1, HUGE)
        history.save_runtime_history({"user:ann": [60.0]}, T0)
        assert a.release_lease(NAME, "ctl-a", 1)
        b.acquire_lease(NAME, "ctl-b", HUGE)
        if db_backend == "memory":
            history.save_runtime_history({"user:ann": [90.0]}, T0 + 1)
            assert history.runtime_history() == {"user:ann": [90.0]}
            refused = 0
        else:
            with pytest.raises(FencedOut):
                history.save_runtime_history({"user:ann": [90.0], "user:bob": [5.0]}, T0 + 1)
            assert history.runtime_history() == {"user:ann": [60.0]}
            refused = 1
        lease = b.lease(NAME)
        assert lease is not None and (lease.holder, lease.refused) == ("ctl-b", refused)
    finally:
        for s in stores:
            s.close()


# ----------------------------------------------------------------------------- injected clock


def lease_of(two: Two) -> tuple[str, int, float, float, float, int]:
    got = two.a.lease(NAME)
    assert got is not None
    return (got.holder, got.token, got.acquired_ts, got.renewed_ts, got.expires_ts, got.refused)


def test_the_lease_is_judged_by_the_store_s_clock(timed: Two, clock: FakeClock) -> None:
    assert timed.a.db_now() == T0
    clock.t = T0 + 42.5
    assert timed.b.db_now() == T0 + 42.5


def test_expiry_is_exclusive(timed: Two, clock: FakeClock) -> None:
    got = timed.a.acquire_lease(NAME, "ctl-a", TTL)
    assert got == Lease(NAME, "ctl-a", 1, T0, T0, T0 + 10, 0)
    clock.t = T0 + 9.5
    assert timed.b.acquire_lease(NAME, "ctl-b", TTL) == got  # not expired: nothing changes
    clock.t = T0 + 10  # at expires_ts the lease is free
    taken = timed.b.acquire_lease(NAME, "ctl-b", TTL)
    assert taken == Lease(NAME, "ctl-b", 2, T0 + 10, T0 + 10, T0 + 20, 0)


def test_renewing_moves_the_expiry_from_now(timed: Two, clock: FakeClock) -> None:
    timed.a.acquire_lease(NAME, "ctl-a", TTL)
    clock.t = T0 + 8
    timed.a.acquire_lease(NAME, "ctl-a", TTL)
    assert lease_of(timed) == ("ctl-a", 1, T0, T0 + 8, T0 + 18, 0)


def test_a_lapsed_holder_coming_back_gets_a_new_term(timed: Two, clock: FakeClock) -> None:
    timed.a.acquire_lease(NAME, "ctl-a", TTL)
    clock.t = T0 + 20
    timed.a.acquire_lease(NAME, "ctl-a", TTL)
    assert lease_of(timed) == ("ctl-a", 2, T0 + 20, T0 + 20, T0 + 30, 0)


def test_release_expires_now_or_stays_expired(timed: Two, clock: FakeClock) -> None:
    timed.a.acquire_lease(NAME, "ctl-a", TTL)
    clock.t = T0 + 3
    assert timed.a.release_lease(NAME, "ctl-a", 1)
    assert lease_of(timed) == ("ctl-a", 1, T0, T0 + 3, T0 + 3, 0)
    # Released again once lapsed: the expiry does not move later.
    clock.t = T0 + 30
    assert timed.a.release_lease(NAME, "ctl-a", 1)
    assert lease_of(timed) == ("ctl-a", 1, T0, T0 + 30, T0 + 3, 0)


def test_check_fence_renews_until_the_term_lapses(timed: Two, clock: FakeClock) -> None:
    timed.a.acquire_lease(NAME, "ctl-a", TTL)
    timed.a.fence = Fence(NAME, "ctl-a", 1, TTL)
    clock.t = T0 + 5
    timed.a.check_fence()
    assert lease_of(timed) == ("ctl-a", 1, T0, T0 + 5, T0 + 15, 0)
    clock.t = T0 + 15  # expired at its expiry: refused, not renewed
    with pytest.raises(FencedOut):
        timed.a.check_fence()
    assert lease_of(timed) == ("ctl-a", 1, T0, T0 + 5, T0 + 15, 1)
