"""runs.role (`evaluation`, or `noise`: made by the noise command, never what a model name resolves
to unless asked), and stored runs restamped to the canonical form of their settings (the subjects in
the benchmark's order, the stop strings sorted, chat=multiturn at 0 shots as single_turn:
`pipeline.canonical`), so that they stay reusable and comparable with new runs.

A run stored before it is a noise run where it was recorded into the noise command's MLflow
experiment, `mmlu_track_noise`. The restamp is not undone by the downgrade (the old forms asked the
same questions with the same prompts).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07 11:30:00
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

NOISE_EXPERIMENT = "mmlu_track_noise"  # NoiseConfig.experiment's default, where every noise run went


def _experiment(config_json: str) -> str | None:
    try:
        doc = json.loads(config_json)
        return str(doc["tracking"]["experiment"])
    except (ValueError, KeyError, TypeError):
        return None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="evaluation"))
    conn = op.get_bind()
    runs = sa.table(
        "runs",
        sa.column("id", sa.String), sa.column("identity", sa.String), sa.column("role", sa.String),
        sa.column("config_json", sa.Text), sa.column("record_json", sa.Text),
        sa.column("protocol_json", sa.Text), sa.column("data_fingerprint", sa.String),
    )  # fmt: skip
    floors = sa.table("noise_floors", sa.column("protocol_key", sa.String))
    rows = conn.execute(
        sa.select(runs.c.id, runs.c.identity, runs.c.config_json, runs.c.record_json, runs.c.protocol_json)
    ).all()
    noise = [r.id for r in rows if _experiment(r.config_json) == NOISE_EXPERIMENT]
    if noise:
        conn.execute(sa.update(runs).where(runs.c.id.in_(noise)).values(role="noise"))
    from mmlu_track.pipeline.canonical import restamp  # the package's rules of the canonical form

    for r in rows:
        new = restamp(r.identity, r.config_json, r.record_json, r.protocol_json)
        if new is None:
            continue
        conn.execute(
            sa.update(runs)
            .where(runs.c.id == r.id)
            .values(
                identity=new.identity,
                config_json=new.config_json,
                protocol_json=new.protocol_json,
                record_json=new.record_json,
                data_fingerprint=new.data_fingerprint,
            )
        )
        if new.old_prompt_key != new.new_prompt_key:  # its noise measurements serve its new form
            conn.execute(
                sa.update(floors)
                .where(floors.c.protocol_key == new.old_prompt_key)
                .values(protocol_key=new.new_prompt_key)
            )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("role")
