"""question_results.scored_by: how each question's scores were obtained (QuestionResult.scored_by)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 18:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.add_column(sa.Column("scored_by", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.drop_column("scored_by")
