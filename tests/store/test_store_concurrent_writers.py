"""Two controllers starting on one PostgreSQL database at once: both write the pools, the
budgets and the operator row that policy declares, and both run the migrations. Under READ
COMMITTED a read-then-insert lets both miss the row and both insert it, and the second dies
on the primary key (stop 20's CI: a standby that never started). Each test here makes the
other writer's insert stand uncommitted while ours runs, which is the race, made certain."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, text

from provisioner.config.models import Budgets, PoolPolicy, TeamBudget
from provisioner.store import Store
from provisioner.store.models import BudgetRow, OperatorStateRow, PoolRow

pytestmark = pytest.mark.postgres
T0 = 1_800_000_000.0
POOL = PoolPolicy(name="burst", cloud="aws", regions=["us-east-1"], gpu_model="A100")


@pytest.fixture
def pg(pg_url) -> Iterator[tuple[str, Store]]:
    """A fresh PostgreSQL database, migrated, and our controller's store on it."""
    url = pg_url()
    store = Store(url)
    yield url, store
    store.close()


def _waiting_on_a_lock(store: Store) -> bool:
    """Some backend of this database waits for a lock: our writer reached the other's row."""
    with store.engine.connect() as c:
        n = c.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        ).scalar_one()
    return bool(n)


def _against_an_uncommitted_insert(
    url: str, row: tuple[type[Any], dict[str, Any]], ours: Callable[[], None]
) -> None:
    """Run `ours` while another writer's insert of `row` stands uncommitted; commit it once
    ours waits on it. Raises whatever `ours` raised."""
    model, values = row
    other = create_engine(url)
    errors: list[BaseException] = []
    probe = Store(url, migrate=False)
    try:
        with other.connect() as conn:
            tx = conn.begin()
            conn.execute(insert(model).values(**values))

            def run() -> None:
                try:
                    ours()
                except BaseException as e:  # handed to the test thread
                    errors.append(e)

            t = threading.Thread(target=run)
            t.start()
            deadline = time.monotonic() + 30
            while not _waiting_on_a_lock(probe):
                assert t.is_alive(), "ours finished without meeting the other writer's row"
                assert time.monotonic() < deadline, "ours never reached the other's row"
                time.sleep(0.02)
            tx.commit()
            t.join(30)
            assert not t.is_alive()
    finally:
        other.dispose()
        probe.close()
    if errors:
        raise errors[0]


def test_pools_sync_meets_a_second_controllers_insert_and_updates_it(pg):
    url, store = pg
    other_row = {"name": "burst", "cloud": "gcp", "max_nodes": 1, "drained": True}
    big = POOL.model_copy(update={"max_nodes": 7})
    _against_an_uncommitted_insert(url, (PoolRow, other_row), lambda: store.sync_pools([big], T0))
    (p,) = store.pools()
    # policy's columns are ours; the drain flag stays the other writer's (the operator's)
    assert (p.cloud, p.max_nodes, p.drained) == ("aws", 7, True)


def test_budgets_sync_meets_a_second_controllers_insert_and_updates_it(pg):
    url, store = pg
    other_row = {"scope": "team", "name": "vision", "monthly_usd": Decimal("1")}
    budgets = Budgets(teams={"vision": TeamBudget(monthly_usd=Decimal("5000"))})
    _against_an_uncommitted_insert(
        url, (BudgetRow, other_row), lambda: store.sync_budgets(budgets, T0)
    )
    assert [(b.scope, b.name, b.monthly_usd) for b in store.budgets()] == [
        ("team", "vision", Decimal("5000"))
    ]


def test_pausing_meets_a_second_writers_first_operator_row(pg):
    url, store = pg
    _against_an_uncommitted_insert(
        url,
        (OperatorStateRow, {"id": 1, "sweep_hold_reason": "held by the other"}),
        lambda: store.set_paused(True, T0, by="alice", reason="quota"),
    )
    st = store.operator_state()
    assert (st.paused, st.updated_by, st.sweep_hold_reason) == (True, "alice", "held by the other")


def test_controllers_opening_a_fresh_database_at_once_all_migrate(pg_url):
    url = pg_url()
    start = threading.Barrier(4)
    errors: list[BaseException] = []
    opened: list[Store] = []

    def open_store() -> None:
        start.wait()
        try:
            opened.append(Store(url))
        except BaseException as e:  # handed to the test thread
            errors.append(e)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        assert len(opened) == 4
        with opened[0].engine.connect() as c:
            versions = c.execute(text("SELECT count(*) FROM alembic_version")).scalar_one()
        assert versions == 1
    finally:
        for s in opened:
            s.close()
