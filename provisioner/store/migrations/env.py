"""Alembic environment: always handed a live connection by `migrations.upgrade`."""

from __future__ import annotations

from alembic import context

from provisioner.domain.errors import InvalidState
from provisioner.store.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise InvalidState("run migrations through provisioner.store.migrations.upgrade()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
