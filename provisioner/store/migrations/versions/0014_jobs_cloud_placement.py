"""jobs cloud placement: a job that ran on a cloud instance is placed "cloud" for good

Revision ID: 0014_jobs_cloud_placement
Revises: 0013_usage_gpu_part

- jobs.placement: before, each sighting overwrote it, so a finished job seen again after its
  instance ended (Slurm lists it a while longer) lost "cloud" while its instance_ids kept the
  instance, and `GET /v1/jobs?where=cloud` no longer found it. Rows that name an instance are
  set to "cloud" again. Data only; the downgrade leaves the corrected rows as they are.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0014_jobs_cloud_placement"
down_revision = "0013_usage_gpu_part"
branch_labels = None
depends_on = None

_JOBS = sa.table(
    "jobs",
    sa.column("job_id", sa.String()),
    sa.column("instance_ids", sa.JSON()),
    sa.column("placement", sa.String()),
)


def _names_an_instance(value: object) -> bool:
    if isinstance(value, str):  # a driver that hands JSON back as text
        value = json.loads(value)
    return bool(value)


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(_JOBS.c.job_id, _JOBS.c.instance_ids).where(_JOBS.c.placement != "cloud")
    )
    wrong = [{"wrong_id": job_id} for job_id, ids in rows if _names_an_instance(ids)]
    if wrong:  # one statement for all of them (executemany), not a round trip per row
        to_cloud = _JOBS.update().where(_JOBS.c.job_id == sa.bindparam("wrong_id"))
        conn.execute(to_cloud.values(placement="cloud"), wrong)


def downgrade() -> None:
    """Nothing to undo: the rows now say what their instance_ids always said."""
