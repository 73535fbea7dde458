"""question_results for questions with other than four choices (MMLU-Pro: 2 to 10): `options`, the
question's number of choices (4 for every row stored before), `logprob_e`..`logprob_j` for the letters
beyond D, and `src`, where MMLU-Pro took the question from (`ori_mmlu-*`: MMLU); NULL for MMLU.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 12:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

EXTRA = ("e", "f", "g", "h", "i", "j")


def upgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.add_column(sa.Column("options", sa.Integer(), nullable=False, server_default="4"))
        for letter in EXTRA:
            batch.add_column(sa.Column(f"logprob_{letter}", sa.Float(), nullable=True))
        batch.add_column(sa.Column("src", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.drop_column("src")
        for letter in reversed(EXTRA):
            batch.drop_column(f"logprob_{letter}")
        batch.drop_column("options")
