"""the leader lease and its fencing token

Revision ID: 0005_leader_lease
Revises: 0004

- leader_lease: one row per lease name (the controller's name): the holder, the fencing token
  (grows with every change of holder), when it was taken, renewed and when it expires (the
  database's clock), and how many writes were refused for carrying a stale token.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_leader_lease"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leader_lease",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("acquired_ts", sa.Float(), nullable=False),
        sa.Column("renewed_ts", sa.Float(), nullable=False),
        sa.Column("expires_ts", sa.Float(), nullable=False),
        sa.Column("refused", sa.BigInteger(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leader_lease")),
    )


def downgrade() -> None:
    op.drop_table("leader_lease")
