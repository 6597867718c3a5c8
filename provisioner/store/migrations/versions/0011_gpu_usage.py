"""gpu_usage: NVML-observed GPU time per UTC hour, GPU and job

Revision ID: 0011_gpu_usage
Revises: 0010_jobs

- gpu_usage: one row per (hour, node, GPU index, job id; "" for time with no job tag): the
  seconds the GPU was watched, its utilisation-weighted seconds, and the seconds a process ran
  on it (domain/gpu_usage.py). The efficiency views' "used" GPU-hours.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_gpu_usage"
down_revision = "0010_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_usage",
        sa.Column("hour_ts", sa.Float(), nullable=False),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("observed_s", sa.Float(), nullable=False),
        sa.Column("util_s", sa.Float(), nullable=False),
        sa.Column("busy_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint(
            "hour_ts", "node", "gpu_index", "job_id", name=op.f("pk_gpu_usage")
        ),
    )
    op.create_index("ix_gpu_usage_hour_ts", "gpu_usage", ["hour_ts"])


def downgrade() -> None:
    op.drop_index("ix_gpu_usage_hour_ts", table_name="gpu_usage")
    op.drop_table("gpu_usage")
