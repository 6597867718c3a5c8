"""Alembic migrations, run programmatically (no alembic.ini).

`upgrade(connection)` brings a database to the newest schema; `Store` calls it at startup.
To write a new revision during development:

    from provisioner.store.migrations import revision
    revision(engine, "add a column")
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from provisioner.domain.errors import InvalidState

HERE = Path(__file__).resolve().parent


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.set_main_option("version_locations", str(HERE / "versions"))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package ships revisions
        raise InvalidState("no migration revisions found")
    return head


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


# Any fixed key: the advisory lock that lets one process at a time migrate a database.
_MIGRATION_LOCK = 0x70726F76  # "prov"


def upgrade(engine: Engine, target: str = "head") -> None:
    """Apply every migration up to `target`, in one transaction where the database allows.
    On PostgreSQL, controllers that open a fresh database at once take turns (a
    transaction-scoped advisory lock); the later ones then find it at head. Two CREATE TABLEs
    racing would fail the second. SQLite's migrations already run one writer at a time."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        command.upgrade(alembic_config(conn), target)


def downgrade(engine: Engine, target: str) -> None:
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), target)


def revision(engine: Engine, message: str) -> None:  # pragma: no cover - a developer tool
    """Autogenerate a new revision from the difference between the models and `engine`."""
    with engine.begin() as conn:
        command.revision(alembic_config(conn), message=message, autogenerate=True)
