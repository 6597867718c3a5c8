"""usage parts: the parts of GPUs a job holds on a node (MIG devices, shards)

Revision ID: 0012_usage_parts
Revises: 0011_gpu_usage

- job_usage.part_gpus: the share of one GPU a job holds beside its whole GPUs (1/7 for a
  one-slice MIG device); its node's price is split by whole GPUs plus this. 0 for rows written
  before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_usage_parts"
down_revision = "0011_gpu_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_usage") as batch:
        batch.add_column(sa.Column("part_gpus", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("job_usage") as batch:
        batch.drop_column("part_gpus")
