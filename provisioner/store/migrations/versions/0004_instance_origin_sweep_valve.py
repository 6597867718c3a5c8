"""instance origin and the sweep's safety valve

Revision ID: 0004
Revises: 0003_token_agent_node_expiry

- instances.origin: "planned" (launched by a scale-up of this controller) or "orphan" (found
  in the cloud by its tags with no record, and rebuilt from them); orphan time is billed as its
  own ledger kind. Existing rows are planned.
- operator_state.sweep_hold_*: the sweep's safety valve (why it holds, since when) and the
  operator's go-ahead (sweep_approved_*).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003_token_agent_node_expiry"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(
            sa.Column("origin", sa.String(length=16), nullable=False, server_default="planned")
        )
    with op.batch_alter_table("operator_state") as batch:
        batch.add_column(
            sa.Column("sweep_hold_reason", sa.String(length=500), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("sweep_hold_ts", sa.Float(), nullable=True))
        batch.add_column(sa.Column("sweep_approved_ts", sa.Float(), nullable=True))
        batch.add_column(
            sa.Column("sweep_approved_by", sa.String(length=128), nullable=False, server_default="")
        )


def downgrade() -> None:
    with op.batch_alter_table("operator_state") as batch:
        for col in ("sweep_approved_by", "sweep_approved_ts", "sweep_hold_ts", "sweep_hold_reason"):
            batch.drop_column(col)
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("origin")
