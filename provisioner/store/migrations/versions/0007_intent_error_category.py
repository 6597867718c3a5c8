"""intent error category

Revision ID: 0007_intent_error_category
Revises: 0006_runtime_history

- intents.error_category: the category of the typed error a completed intent met ('' for
  none), so the per-offer back-off is rebuilt after a restart from a column instead of from
  the error code's text. Existing rows stay NULL: they are read as before (by the code's
  prefix).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_intent_error_category"
down_revision = "0006_runtime_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("intents") as batch:
        batch.add_column(sa.Column("error_category", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("intents") as batch:
        batch.drop_column("error_category")
