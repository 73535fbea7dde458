"""Noise measurements in the SQL store (`noise_floors`): saved by `python -m mmlu_track.noise`,
found by the gate through the protocol of the runs it compares. The one mapping between a
`records.stored.NoiseEntry` and its row."""

from __future__ import annotations

import dataclasses

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from mmlu_track.records.stored import NoiseEntry
from mmlu_track.store.orm import NoiseRow
from mmlu_track.store.sql import SqlStore


def save_noise(store: SqlStore, entry: NoiseEntry) -> None:
    with Session(store.engine) as s, s.begin():
        s.add(NoiseRow(**dataclasses.asdict(entry)))


def set_noise_mlflow(store: SqlStore, noise_id: str, mlflow_run_id: str) -> None:
    with Session(store.engine) as s, s.begin():
        s.execute(update(NoiseRow).where(NoiseRow.id == noise_id).values(mlflow_run_id=mlflow_run_id))


def latest_noise(store: SqlStore, protocol_key: str) -> NoiseEntry | None:
    """The newest noise measurement of this protocol, if any."""
    query = select(NoiseRow).where(NoiseRow.protocol_key == protocol_key).order_by(NoiseRow.created_at.desc())
    with Session(store.engine) as s:
        row = s.scalars(query.limit(1)).first()
        if row is None:
            return None
        return NoiseEntry(**{f.name: getattr(row, f.name) for f in dataclasses.fields(NoiseEntry)})


def noise_entries(store: SqlStore, limit: int = 20) -> list[NoiseEntry]:
    """The newest noise measurements, newest first (`runs noise`)."""
    with Session(store.engine) as s:
        rows = s.scalars(select(NoiseRow).order_by(NoiseRow.created_at.desc()).limit(limit))
        return [
            NoiseEntry(**{f.name: getattr(r, f.name) for f in dataclasses.fields(NoiseEntry)}) for r in rows
        ]
