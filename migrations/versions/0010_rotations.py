"""question_results.rotations_json: a circular run's answers in the other 3 rotations of the choices

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.add_column(sa.Column("rotations_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.drop_column("rotations_json")
