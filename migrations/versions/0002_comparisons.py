"""comparisons

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 13:29:54.404663
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "comparisons",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("baseline_run_id", sa.String(length=32), nullable=False),
        sa.Column("candidate_run_id", sa.String(length=32), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("policy", sa.String(length=64), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("delta_micro", sa.Float(), nullable=False),
        sa.Column("delta_macro", sa.Float(), nullable=False),
        sa.Column("p_regression", sa.Float(), nullable=True),
        sa.Column("p_noninferiority", sa.Float(), nullable=True),
        sa.Column("margin", sa.Float(), nullable=False),
        sa.Column("n_flagged", sa.Integer(), nullable=False),
        sa.Column("report_json", sa.Text(), nullable=False),
        sa.Column("mlflow_run_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["baseline_run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["candidate_run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_comparisons_baseline_run_id"), ["baseline_run_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_comparisons_candidate_run_id"), ["candidate_run_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_comparisons_candidate_run_id"))
        batch_op.drop_index(batch_op.f("ix_comparisons_baseline_run_id"))

    op.drop_table("comparisons")
