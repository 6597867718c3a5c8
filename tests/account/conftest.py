"""Accounting fixtures: every test runs on SQLite, and on PostgreSQL when it runs
(tests/databases.py), each on a database of its own."""

from __future__ import annotations

import pytest

from provisioner.store import Store


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    yield s
    s.close()
