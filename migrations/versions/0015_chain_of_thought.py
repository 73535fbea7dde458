"""question_results for chains of thought (`scoring=cot`): `extraction`, the rule that read the answer
(`answer is`, `answer:`, `last letter`, `none`, `beyond`, `guess`), `new_tokens`, how many tokens the
model generated, and `finish`, why it ended (`stop`, `end`, `length`: cut by the token limit); NULL for
every other question.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 13:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.add_column(sa.Column("extraction", sa.String(16), nullable=True))
        batch.add_column(sa.Column("new_tokens", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("finish", sa.String(8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("question_results") as batch:
        batch.drop_column("finish")
        batch.drop_column("new_tokens")
        batch.drop_column("extraction")
