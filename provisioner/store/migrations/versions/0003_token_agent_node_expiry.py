"""api token node binding and expiry

Revision ID: 0003_token_agent_node_expiry
Revises: 0002

Two nullable columns on api_tokens, nothing else changes (existing tokens keep working: they
are bound to no node and never expire):
- node: the one node an `agent` token may push telemetry for;
- expires_ts: when the token stops working (`provisioner token create --ttl`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_token_agent_node_expiry"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("node", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("expires_ts", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("expires_ts")
        batch.drop_column("node")
