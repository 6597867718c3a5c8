"""Store fixtures. SQLite by default; set PROVISIONER_TEST_DATABASE_URL to a PostgreSQL URL
(e.g. postgresql+psycopg://postgres@/postgres?host=/tmp&port=5432) to run the same tests
there: each test gets a database of its own, dropped afterwards."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from store_helpers import PG_URL

from provisioner.reconcile.store import Store


@pytest.fixture
def db_url(tmp_path):
    if not PG_URL:
        yield f"sqlite:///{tmp_path / 'store.sqlite'}"
        return
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    yield s
    s.close()
