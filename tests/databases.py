"""The store's two engines for the tests: SQLite (always) and PostgreSQL when
PROVISIONER_TEST_DATABASE_URL names a server (`make test` starts a private one, see
scripts/pg-up.sh). Tests that take `db_url` or `make_db_url` run once per engine; each gets a
database of its own (a SQLite file, or a PostgreSQL database dropped afterwards).
A uniquely named module (not conftest) so subprocesses of the tests can import it too."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PG_URL = os.environ.get("PROVISIONER_TEST_DATABASE_URL", "")
BACKENDS = ["sqlite", *(["postgresql"] if PG_URL else [])]


class Databases:
    """Makes fresh databases for one engine and drops the PostgreSQL ones at `close()`."""

    def __init__(self, backend: str, folder: Path) -> None:
        self.backend = backend
        self.folder = folder
        self._made: list[str] = []

    def new_url(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        if self.backend == "sqlite":
            return f"sqlite:///{self.folder / (name + '.sqlite')}"
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as c:
                c.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        self._made.append(name)
        return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)

    def close(self) -> None:
        if not self._made:
            return
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as c:
                for name in self._made:
                    c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()
        self._made.clear()


def databases(backend: str, folder: Path) -> Iterator[Callable[[], str]]:
    dbs = Databases(backend, folder)
    try:
        yield dbs.new_url
    finally:
        dbs.close()
