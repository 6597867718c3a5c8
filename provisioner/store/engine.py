"""The store's engine and sessions: SQLite (WAL) or PostgreSQL by URL, migrations on open,
and the write-transaction / read-session pair every store concern builds on."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from provisioner.domain.records import Fence
from provisioner.ports.store import FencedOut, StoreError
from provisioner.store import migrations
from provisioner.store.models import _table

DEFAULT_URL = "sqlite:///provisioner.sqlite"


def owner_only(path: Path) -> None:
    """The store's file readable by its owner alone (it holds token hashes and every dollar):
    made so when it is created, and tightened when found open to others. SQLite gives its -wal
    and -shm files the database file's mode. Its folder is the user's and is left as it is."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        st = path.stat()
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            path.chmod(0o600)
    except OSError:
        return  # a missing folder: SQLite says so, naming the file, when it connects
    else:
        os.close(fd)


def private_folder(path: Path) -> None:
    """A folder the product creates for its store (the demo's `.demo/`), owner-only (0700)
    when it makes it. One that already exists is left as it is: it may be the user's own."""
    if not path.exists():
        path.mkdir(parents=True, mode=0o700)
        path.chmod(0o700)  # mkdir's mode passes through the umask


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """An engine for `url`. SQLite files get WAL, foreign keys and a busy timeout; in-memory
    SQLite shares one connection so every session sees the same database."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return create_engine(url, echo=echo, pool_pre_ping=True)
    memory = u.database in (None, "", ":memory:")
    if not memory and u.database and not u.database.startswith("file:"):
        owner_only(Path(u.database))
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if memory:
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, echo=echo, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (see _on_begin).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front so a read-then-write never fails half-way.
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class StoreBase:
    """The engine and sessions of the controller's database; each store concern extends it."""

    # Set by a controller in HA mode (see store_lease.py); None: one controller, no fencing.
    fence: Fence | None = None

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        migrate: bool = True,
        echo: bool = False,
        engine: Engine | None = None,
    ) -> None:
        self.engine = engine or make_engine(url, echo=echo)
        self.dialect = self.engine.dialect.name
        writer = self.engine.execution_options(sqlite_immediate=True)
        self._write = sessionmaker(writer, expire_on_commit=False)
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        if migrate:
            self.migrate()

    def migrate(self) -> None:
        migrations.upgrade(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def _upsert(
        self,
        s: Session,
        model: type[Any],
        rows: Sequence[Mapping[str, Any]],
        *,
        update: Sequence[str] = (),
    ) -> None:
        """Insert `rows`; where the primary key is already there, set only the `update`
        columns (none: leave the row alone). One statement, so two writers at once (two
        controllers starting on one database) cannot both miss the row and both insert it:
        the second waits for the first, then updates. A get-then-add does not hold up."""
        if not rows:
            return
        table = _table(model)
        keys = [c.name for c in table.primary_key.columns]
        if self.dialect in ("sqlite", "postgresql"):
            ins = (sqlite.insert if self.dialect == "sqlite" else postgresql.insert)(table)
            stmt = (
                ins.on_conflict_do_update(
                    index_elements=keys, set_={c: ins.excluded[c] for c in update}
                )
                if update
                else ins.on_conflict_do_nothing(index_elements=keys)
            )
            s.execute(stmt, list(rows))
            return
        for row in rows:  # pragma: no cover - other dialects: read, then write
            where = [table.c[k] == row[k] for k in keys]
            if s.execute(select(*table.primary_key.columns).where(*where)).first() is None:
                s.execute(table.insert(), [dict(row)])
            elif update:
                s.execute(table.update().where(*where).values({c: row[c] for c in update}))

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One write transaction: committed on success, rolled back on any exception."""
        with self._write.begin() as session:
            yield session

    @contextmanager
    def fenced_transaction(self) -> Iterator[Session]:
        """A write transaction that acts on the world: refused as a whole, with FencedOut,
        when this store's fence is not the current lease (store_lease.py)."""
        fence = self.fence
        try:
            with self._write.begin() as session:
                if fence is not None:
                    self._check_fence_in(session, fence)
                yield session
        except FencedOut as refused:
            self._count_refusal(fence, refused)
            raise

    def _check_fence_in(self, session: Session, fence: Fence) -> None:
        raise StoreError("this store has no leader lease to check a fence against")

    def _count_refusal(self, fence: Fence | None, refused: FencedOut) -> None:
        pass

    @contextmanager
    def reading(self) -> Iterator[Session]:
        with self._read() as session:
            yield session
