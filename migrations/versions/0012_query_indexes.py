"""Indexes the commands' queries need: runs by creation time (runs list, newest first), by MLflow
run id (a run named by it), by model, status and creation time (a model's finished runs, newest
first: the gate's lookup by name), noise measurements by creation time (runs noise); db.upgrade
then runs ANALYZE on SQLite.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 21:50:00
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_mlflow_run_id"), ["mlflow_run_id"], unique=False)
        batch_op.create_index(
            "ix_runs_model_status_created", ["model_name", "status", "created_at"], unique=False
        )
    with op.batch_alter_table("noise_floors", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_noise_floors_created_at"), ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("noise_floors", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_noise_floors_created_at"))
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_model_status_created")
        batch_op.drop_index(batch_op.f("ix_runs_mlflow_run_id"))
        batch_op.drop_index(batch_op.f("ix_runs_created_at"))
