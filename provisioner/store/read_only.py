"""A store opened for reading only, as the API's export processes open it."""

from __future__ import annotations

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from provisioner.store import Store


def open_read_only(url: str) -> Store:
    """The store on `url`, never migrated. On PostgreSQL every transaction is read-only
    (`default_transaction_read_only`), so a bug in a reader cannot write; SQLite has no such
    mode for one connection, and the reader only reads."""
    if make_url(url).get_backend_name() == "postgresql":
        engine = create_engine(
            url,
            pool_pre_ping=True,
            connect_args={"options": "-c default_transaction_read_only=on"},
        )
        return Store(url, migrate=False, engine=engine)
    return Store(url, migrate=False)


__all__ = ["open_read_only"]
