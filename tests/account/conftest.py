"""Accounting fixtures. SQLite by default; PROVISIONER_TEST_DATABASE_URL (PostgreSQL) runs the
same tests there, one database per test."""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from provisioner.reconcile.store import Store

PG_URL = os.environ.get("PROVISIONER_TEST_DATABASE_URL", "")


@pytest.fixture
def store(tmp_path):
    if not PG_URL:
        s = Store(f"sqlite:///{tmp_path / 'acct.sqlite'}")
        yield s
        s.close()
        return
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    s = Store(make_url(PG_URL).set(database=name).render_as_string(hide_password=False))
    yield s
    s.close()
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
