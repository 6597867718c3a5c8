"""runtime history

Revision ID: 0006_runtime_history
Revises: 0005_leader_lease

- runtime_history: the runtimes the controller learned from jobs it saw end, per user, group
  (account) and partition (plan/history.py), so predictions survive a restart.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_runtime_history"
down_revision = "0005_leader_lease"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runtime_history",
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("runtimes", sa.JSON(), nullable=False),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_runtime_history")),
    )


def downgrade() -> None:
    op.drop_table("runtime_history")
