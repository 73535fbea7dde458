"""noise_floors: measurements of an evaluation's own noise (python -m mmlu_track.noise)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 10:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "noise_floors",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("protocol_key", sa.String(length=64), nullable=False),
        sa.Column("model_name", sa.String(length=255), nullable=False),
        sa.Column("reference_run_id", sa.String(length=32), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("flip_rate", sa.Float(), nullable=False),
        sa.Column("margin", sa.Float(), nullable=False),
        sa.Column("shot_seed_range", sa.Float(), nullable=True),
        sa.Column("report_json", sa.Text(), nullable=False),
        sa.Column("mlflow_run_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["reference_run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("noise_floors", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_noise_floors_protocol_key"), ["protocol_key"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_noise_floors_reference_run_id"), ["reference_run_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("noise_floors", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_noise_floors_reference_run_id"))
        batch_op.drop_index(batch_op.f("ix_noise_floors_protocol_key"))
    op.drop_table("noise_floors")
