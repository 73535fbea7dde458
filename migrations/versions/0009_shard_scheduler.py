"""run_shards.scheduler: the SLURM job or Ray task a shard's process runs as (liveness.scheduler);
run_shards.work_json: what its process did (records.stored.ShardWork), summed in a sharded run's timing;
runs.model_dtype: the dtype the model was loaded in (`auto` resolved), known before the run finishes

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 07:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("model_dtype", sa.String(16), nullable=True))
    with op.batch_alter_table("run_shards") as batch:
        batch.add_column(sa.Column("scheduler", sa.String(255), nullable=True))
        batch.add_column(sa.Column("work_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_shards") as batch:
        batch.drop_column("work_json")
        batch.drop_column("scheduler")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("model_dtype")
