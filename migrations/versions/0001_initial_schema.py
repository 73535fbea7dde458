"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 13:11:19.681466
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("identity", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("model_name", sa.String(length=255), nullable=False),
        sa.Column("model_revision", sa.String(length=255), nullable=True),
        sa.Column("scoring", sa.String(length=32), nullable=False),
        sa.Column("formulation", sa.String(length=32), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("data_fingerprint", sa.String(length=64), nullable=False),
        sa.Column("template_hash", sa.String(length=32), nullable=False),
        sa.Column("git_commit", sa.String(length=64), nullable=True),
        sa.Column("config_json", sa.Text(), nullable=False),
        sa.Column("record_json", sa.Text(), nullable=True),
        sa.Column("n_questions", sa.Integer(), nullable=False),
        sa.Column("acc_micro", sa.Float(), nullable=True),
        sa.Column("acc_macro", sa.Float(), nullable=True),
        sa.Column("mlflow_run_id", sa.String(length=64), nullable=True),
        sa.Column("output_dir", sa.Text(), nullable=True),
        sa.Column("sweep", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_data_fingerprint"), ["data_fingerprint"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_identity"), ["identity"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_model_name"), ["model_name"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_status"), ["status"], unique=False)

    op.create_table(
        "question_results",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("question_index", sa.Integer(), nullable=False),
        sa.Column("prompt_hash", sa.String(length=32), nullable=False),
        sa.Column("shots_used", sa.Integer(), nullable=False),
        sa.Column("n_tokens", sa.Integer(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("logprob_a", sa.Float(), nullable=True),
        sa.Column("logprob_b", sa.Float(), nullable=True),
        sa.Column("logprob_c", sa.Float(), nullable=True),
        sa.Column("logprob_d", sa.Float(), nullable=True),
        sa.Column("generated", sa.Text(), nullable=True),
        sa.Column("prediction", sa.Integer(), nullable=True),
        sa.Column("gold", sa.Integer(), nullable=False),
        sa.Column("correct", sa.Boolean(), nullable=False),
        sa.Column("margin", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "subject", "question_index"),
    )
    op.create_table(
        "subject_scores",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("correct", sa.Integer(), nullable=False),
        sa.Column("acc", sa.Float(), nullable=False),
        sa.Column("stderr", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "subject"),
    )


def downgrade() -> None:
    op.drop_table("subject_scores")
    op.drop_table("question_results")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_status"))
        batch_op.drop_index(batch_op.f("ix_runs_model_name"))
        batch_op.drop_index(batch_op.f("ix_runs_identity"))
        batch_op.drop_index(batch_op.f("ix_runs_data_fingerprint"))

    op.drop_table("runs")
