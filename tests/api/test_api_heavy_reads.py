"""Issue 30 item 4: heavy reads off the loop. The FOCUS export runs in a child process with its
own connection (read-only on PostgreSQL), at most two at once, and each token may pull a few a
minute; every refusal is a 429 with Retry-After. On SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from api_helpers import T0, make_env, seed

from provisioner.account.focus import FocusOptions
from provisioner.api.auth import Role, create_token
from provisioner.api.heavy_reads import HeavyReads
from provisioner.api.rate_limits import ApiRateLimiter, RateLimits
from provisioner.store import Store
from provisioner.store.read_only import open_read_only


class Tick:
    """A hand-driven wall clock for the rate limits."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def heavy(db_url):
    store = Store(db_url)
    seed(store)
    tick = Tick()
    reads = HeavyReads(read_url=db_url, open_store=open_read_only)
    e = make_env(
        store,
        heavy_reads=reads,
        rate_limiter=ApiRateLimiter(RateLimits(focus_exports_per_minute=3), clock=tick),
    )
    yield e, reads, tick
    e.client.close()
    store.close()


def test_the_export_from_its_own_process_holds_every_ledger_row(heavy):
    env, reads, _ = heavy
    r = env.client.get(
        "/v1/focus.csv", params={"from": "2026-01-01", "to": "2026-02-01"}, headers=env.h("viewer")
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert rows and reads.spawned == 1
    # Every ledger row, read back from the store itself, and its dollars.
    entries = env.store.ledger_entries()
    assert len(rows) == len(entries)
    billed = sum((Decimal(row["BilledCost"]) for row in rows), Decimal(0))
    assert billed == sum((e.cost for e in entries), Decimal(0))


def test_a_third_export_at_once_and_a_fourth_in_a_minute_are_told_when_to_come_back(heavy):
    env, reads, tick = heavy
    opts = FocusOptions()
    a = reads.focus_csv(env.store, None, None, opts)
    b = reads.focus_csv(env.store, None, None, opts)
    r = env.client.get("/v1/focus.csv", headers=env.h("viewer"))
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert reads.running == 2
    a.close()  # a reader gone before the first byte frees its slot and ends its process
    assert reads.running == 1
    list(b)
    assert reads.running == 0
    del b
    assert env.client.get("/v1/focus.csv", headers=env.h("viewer")).status_code == 200
    assert env.client.get("/v1/focus.csv", headers=env.h("viewer")).status_code == 200
    r = env.client.get("/v1/focus.csv", headers=env.h("viewer"))  # 4th in this minute
    assert r.status_code == 429 and r.headers["retry-after"] == "60", r.text
    assert "per token" in r.json()["detail"]
    other = create_token(env.store, Role.VIEWER, "someone-else", T0)
    r = env.client.get("/v1/focus.csv", headers={"Authorization": f"Bearer {other}"})
    assert r.status_code == 200  # the limit is per token
    tick.t += 60
    assert env.client.get("/v1/focus.csv", headers=env.h("viewer")).status_code == 200


def test_on_postgresql_the_export_process_cannot_write(pg_url):
    url = pg_url()
    Store(url).close()  # migrated once, as the controller does
    reader = open_read_only(url)
    try:
        with pytest.raises(Exception, match="read-only"):
            create_token(reader, Role.VIEWER, "nope", T0)
        assert reader.ledger_entries() == []  # reads still work
    finally:
        reader.close()
