"""usage gpu part: which part of a GPU a job held, on its usage and on the ledger rows it pays

Revision ID: 0013_usage_gpu_part
Revises: 0012_usage_parts

- job_usage.gpu_part: the MIG devices' GRES type (`1g.10gb`), `shard`, or "" for whole GPUs
  only, from the job's request.
- ledger.gpu_part: the same, on the rows priced from a job's usage (job, onprem and energy), so
  a cost report can group by slice; "" on idle rows and rows of no job. No rollup keeps it (a
  report by slice reads the ledger, as one by node does). "" for rows written before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_usage_gpu_part"
down_revision = "0012_usage_parts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("job_usage", "ledger"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("gpu_part", sa.String(length=128), nullable=False, server_default="")
            )


def downgrade() -> None:
    for table in ("ledger", "job_usage"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("gpu_part")
