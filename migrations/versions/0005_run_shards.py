"""run_shards: which process scores which shard of a run (several processes share one sharded run)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_shards",
        sa.Column(
            "run_id", sa.String(length=32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("shards", sa.Integer(), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "shards", "shard"),
    )
    # A run being evaluated before this revision was one unsharded process.
    op.execute(
        "INSERT INTO run_shards (run_id, shards, shard, status, owner, heartbeat_at) "
        "SELECT id, 1, 0, status, owner, heartbeat_at FROM runs WHERE status IN ('running', 'failed')"
    )


def downgrade() -> None:
    op.drop_table("run_shards")
