"""controller identity: the `controller` tag of this installation, kept in the store

Revision ID: 0009_controller_identity
Revises: 0008_clocks

- operator_state.controller_id: claimed once (the first claim wins, for an HA pair too), so
  two installations in one cloud account never take each other's instances for their own.
  "" until claimed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_controller_identity"
down_revision = "0008_clocks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operator_state") as batch:
        batch.add_column(
            sa.Column("controller_id", sa.String(41), nullable=False, server_default="")
        )


def downgrade() -> None:
    with op.batch_alter_table("operator_state") as batch:
        batch.drop_column("controller_id")
