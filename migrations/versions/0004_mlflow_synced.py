"""mlflow_synced_at: an MLflow run is opened when scoring starts, complete only when this is set

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 02:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("mlflow_synced_at", sa.DateTime(), nullable=True))
    # Before this revision an MLflow run id was stored only once the run was fully logged.
    op.execute(
        "UPDATE runs SET mlflow_synced_at = COALESCE(finished_at, created_at) WHERE mlflow_run_id IS NOT NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("mlflow_synced_at")
