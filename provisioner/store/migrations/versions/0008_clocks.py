"""clocks: the controller's clock marks, the clouds' skew, the cloud's stamp of a step

Revision ID: 0008_clocks
Revises: 0007_intent_error_category

- clock_marks: per host boot, where the controller's clock stood on the monotonic clock at its
  last pass, so a restart carries it on (a wall-clock step in between changes nothing), and the
  floor no lifecycle stamp goes below.
- cloud_clocks: per cloud account, the measured skew (cloud clock minus the controller's).
- instance_transitions.cloud_ts: the cloud's own stamp for a step (launch, termination),
  translated by the skew and clamped into what the controller saw; billing starts and ends
  there. NULL for existing steps and for steps the cloud gave no stamp for (at_ts is used).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_clocks"
down_revision = "0007_intent_error_category"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clock_marks",
        sa.Column("boot_id", sa.String(64), nullable=False),
        sa.Column("mono_s", sa.Float(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("boot_id", name=op.f("pk_clock_marks")),
    )
    op.create_table(
        "cloud_clocks",
        sa.Column("cloud", sa.String(16), nullable=False),
        sa.Column("account", sa.String(128), nullable=False),
        sa.Column("skew_s", sa.Float(), nullable=False),
        sa.Column("uncertainty_s", sa.Float(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("measured_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("cloud", "account", name=op.f("pk_cloud_clocks")),
    )
    with op.batch_alter_table("instance_transitions") as batch:
        batch.add_column(sa.Column("cloud_ts", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instance_transitions") as batch:
        batch.drop_column("cloud_ts")
    op.drop_table("cloud_clocks")
    op.drop_table("clock_marks")
