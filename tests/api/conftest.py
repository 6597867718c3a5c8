"""API fixtures: the seeded store on SQLite, and on PostgreSQL when it runs (tests/databases.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_helpers import make_env, seed

from provisioner.store import Store


@pytest.fixture(scope="module")
def env(make_db_url):
    store = Store(make_db_url())
    seed(store)
    e = make_env(store)
    yield e
    e.client.close()
    store.close()


@pytest.fixture
def fresh(db_url):
    store = Store(db_url)
    seed(store)
    e = make_env(store)
    yield e
    e.client.close()
    store.close()


@pytest.fixture(scope="module")
def munged() -> Iterator[str]:
    """A private munged (its own key and socket): what a burst node's MUNGE credentials to the
    API are made and decoded with."""
    from provisioner.testing.munge_daemon import private_munged

    with private_munged() as sock:
        yield sock
