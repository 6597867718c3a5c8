"""The leader lease and fencing, on SQLite and PostgreSQL, with the lease's clock injected:
who may take the lease and when, and that a write carrying a stale token is refused whole."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlalchemy import func, select
from store_helpers import T0, make_instance

from provisioner.domain.records import Fence, LedgerEntry, NewIntent
from provisioner.reconcile.leadership import Leadership
from provisioner.store import FencedOut, Store
from provisioner.store.models import IntentRow

NAME = "burst-ctl"
TTL = 10.0


class LeaseClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock():
    return LeaseClock()


@pytest.fixture
def two(db_url, clock):
    """Two controllers' stores on one database, sharing the lease clock."""
    a, b = Store(db_url), Store(db_url, migrate=False)
    a.lease_clock = b.lease_clock = clock
    yield a, b
    a.close()
    b.close()


def _intents(store: Store) -> int:
    with store.reading() as s:
        return int(s.execute(select(func.count()).select_from(IntentRow)).scalar_one())


def test_first_holder_gets_token_1_and_a_second_waits_for_expiry(two, clock):
    a, b = two
    got = a.acquire_lease(NAME, "ctl-a", TTL)
    assert (got.holder, got.token, got.expires_ts) == ("ctl-a", 1, 1010.0)
    clock.t = 1009.0
    other = b.acquire_lease(NAME, "ctl-b", TTL)
    assert (other.holder, other.token) == ("ctl-a", 1)  # not expired: nothing changes
    clock.t = 1010.0  # expiry is exclusive: at expires_ts the lease is free
    taken = b.acquire_lease(NAME, "ctl-b", TTL)
    assert (taken.holder, taken.token, taken.acquired_ts) == ("ctl-b", 2, 1010.0)


def test_renewing_keeps_the_token_and_moves_the_expiry(two, clock):
    a, _ = two
    a.acquire_lease(NAME, "ctl-a", TTL)
    clock.t = 1008.0
    again = a.acquire_lease(NAME, "ctl-a", TTL)
    assert (again.token, again.acquired_ts, again.expires_ts) == (1, 1000.0, 1018.0)


def test_a_lapsed_holder_coming_back_starts_a_new_term(two, clock):
    a, _ = two
    a.acquire_lease(NAME, "ctl-a", TTL)
    clock.t = 1020.0
    back = a.acquire_lease(NAME, "ctl-a", TTL)
    assert back.token == 2  # writes carrying token 1 are refused from now on


def test_a_stale_token_write_is_refused_whole_and_counted(two, clock):
    a, b = two
    a.acquire_lease(NAME, "ctl-a", TTL)
    a.fence = Fence(NAME, "ctl-a", 1, TTL)
    a.record_intent(NewIntent("scale_up", "tok-1", T0, pool="p", nodes=1))
    clock.t = 1011.0
    b.acquire_lease(NAME, "ctl-b", TTL)  # ctl-a was paused past its lease
    with pytest.raises(FencedOut, match=r"token 1 of ctl-a is stale.*ctl-b \(token 2\)"):
        a.record_intent(NewIntent("scale_up", "tok-2", T0, pool="p", nodes=1))
    with pytest.raises(FencedOut):
        a.confirm("tok-1", T0, instances=[make_instance("i-1")])
    with pytest.raises(FencedOut):
        a.add_ledger(
            [LedgerEntry(start_ts=T0, end_ts=T0 + 60, kind="idle", cost=Decimal("1.00"), pool="p")]
        )
    assert _intents(b) == 1
    assert b.intent("tok-1").status == "pending"  # the refused confirm changed nothing
    assert b.instance("i-1") is None
    assert b.ledger_entries() == []
    assert b.lease(NAME).refused == 3


def test_an_expired_lease_refuses_writes_until_renewed(two, clock):
    a, _ = two
    a.acquire_lease(NAME, "ctl-a", TTL)
    a.fence = Fence(NAME, "ctl-a", 1, TTL)
    clock.t = 1010.5
    with pytest.raises(FencedOut, match=r"expired 0\.5s ago"):
        a.record_intent(NewIntent("terminate", "tok-1", T0, instance_id="i-1"))
    renewed = a.acquire_lease(NAME, "ctl-a", TTL)
    a.fence = Fence(NAME, "ctl-a", renewed.token, TTL)
    a.record_intent(NewIntent("terminate", "tok-1", T0, instance_id="i-1"))
    assert _intents(a) == 1


def test_check_fence_renews_for_the_leader_and_refuses_anyone_else(two, clock):
    a, b = two
    a.acquire_lease(NAME, "ctl-a", TTL)
    a.fence = Fence(NAME, "ctl-a", 1, TTL)
    clock.t = 1005.0
    a.check_fence()
    assert a.lease(NAME).expires_ts == 1015.0
    b.fence = Fence(NAME, "ctl-b", 0, TTL)
    with pytest.raises(FencedOut):
        b.check_fence()


def test_without_a_fence_nothing_is_checked(db_url):
    s = Store(db_url)
    s.check_fence()
    s.record_intent(NewIntent("scale_up", "tok-1", T0, pool="p", nodes=1))
    assert _intents(s) == 1
    s.close()


def test_release_lets_a_standby_take_over_at_once(two, clock):
    a, b = two
    a.acquire_lease(NAME, "ctl-a", TTL)
    assert not a.release_lease(NAME, "ctl-a", 7)  # not its token: nothing released
    assert a.release_lease(NAME, "ctl-a", 1)
    taken = b.acquire_lease(NAME, "ctl-b", TTL)
    assert (taken.holder, taken.token) == ("ctl-b", 2)


def test_leadership_leads_stands_by_and_takes_over(two, clock):
    a, b = two
    la = Leadership(a, NAME, ttl_s=TTL, holder="ctl-a")
    lb = Leadership(b, NAME, ttl_s=TTL, holder="ctl-b")
    assert la.ensure() is True
    assert lb.ensure() is False
    assert b.fence == Fence(NAME, "ctl-b", 0, TTL)  # fenced though it never led
    with pytest.raises(FencedOut):
        b.record_intent(NewIntent("scale_up", "tok-b", T0, pool="p", nodes=1))
    a.record_intent(NewIntent("scale_up", "tok-a", T0, pool="p", nodes=1))
    view = lb.view()
    assert (view.leading, view.leader, view.token) == (False, "ctl-a", 1)
    clock.t = 1011.0
    assert lb.ensure() is True
    assert la.ensure() is False
    assert a.fence == Fence(NAME, "ctl-a", 1, TTL)  # kept at its stale token, not cleared
    with pytest.raises(FencedOut):
        a.record_intent(NewIntent("scale_up", "tok-a2", T0, pool="p", nodes=1))
    b.record_intent(NewIntent("scale_up", "tok-b", T0, pool="p", nodes=1))
    assert lb.view().as_dict()["role"] == "leader" and la.view().as_dict()["role"] == "standby"


def test_leadership_stands_by_when_the_database_is_unreachable(tmp_path, clock):
    s = Store(f"sqlite:///{tmp_path / 'gone' / 'x.sqlite'}", migrate=False)
    lead = Leadership(s, NAME, ttl_s=TTL, holder="ctl-a")
    assert lead.ensure() is False
    assert lead.view().error.startswith("OperationalError")
    s.close()
