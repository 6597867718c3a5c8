"""jobs: every job the controller has seen, as Slurm last showed it

Revision ID: 0010_jobs
Revises: 0009_controller_identity

- jobs: one row per job id (domain/job_records.py): submit, eligible, start and end times,
  the time limit, GPUs and GRES type, partition, account, user, team, state, where it last ran
  (nodes, and the cloud instances among them), first and last seen, and the runtime the
  controller predicted while it waited. The console's Jobs page
  and the replay of the site's own past read it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_jobs"
down_revision = "0009_controller_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("submit_ts", sa.Float(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=False),
        sa.Column("partition", sa.String(length=128), nullable=False),
        sa.Column("account", sa.String(length=128), nullable=False),
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("team", sa.String(length=128), nullable=False),
        sa.Column("eligible_ts", sa.Float(), nullable=True),
        sa.Column("start_ts", sa.Float(), nullable=True),
        sa.Column("end_ts", sa.Float(), nullable=True),
        sa.Column("time_limit_s", sa.Float(), nullable=True),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("instance_ids", sa.JSON(), nullable=False),
        sa.Column("placement", sa.String(length=8), nullable=False),
        sa.Column("first_seen_ts", sa.Float(), nullable=False),
        sa.Column("last_seen_ts", sa.Float(), nullable=False),
        sa.Column("predicted_runtime_s", sa.Float(), nullable=True),
        sa.Column("prediction_source", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_jobs")),
    )
    op.create_index("ix_jobs_submit_ts", "jobs", ["submit_ts"])
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_team_submit_ts", "jobs", ["team", "submit_ts"])


def downgrade() -> None:
    op.drop_index("ix_jobs_team_submit_ts", table_name="jobs")
    op.drop_index("ix_jobs_state", table_name="jobs")
    op.drop_index("ix_jobs_submit_ts", table_name="jobs")
    op.drop_table("jobs")
