"""gpu telemetry payloads and energy billing marks

Revision ID: 0002
Revises: 0001

Two new tables, nothing existing changes (a database at 0001 upgrades in place; code at 0001
ignores them):
- gpu_telemetry_payload: the latest whole agent payload per node, and since when each GPU has
  been idle (waste and health views);
- gpu_energy_marks: per GPU, the last telemetry sample whose energy is in the ledger, so the
  same window is never billed twice.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_telemetry_payload",
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("sampled_ts", sa.Float(), nullable=False),
        sa.Column("received_ts", sa.Float(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("idle_since", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("node", name=op.f("pk_gpu_telemetry_payload")),
    )
    op.create_table(
        "gpu_energy_marks",
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("gpu_key", sa.String(length=128), nullable=False),
        sa.Column("sampled_ts", sa.Float(), nullable=False),
        sa.Column("energy_mj", sa.Float(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("node", "gpu_key", name=op.f("pk_gpu_energy_marks")),
    )


def downgrade() -> None:
    op.drop_table("gpu_energy_marks")
    op.drop_table("gpu_telemetry_payload")
