"""question_results.annotation: the question's MMLU-Redux annotation (`ok`, `wrong_groundtruth`, …)
where the run was given annotations (data.annotations); NULL: not annotated, or none given.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.add_column(sa.Column("annotation", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.drop_column("annotation")
