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


def _entry(row: NoiseRow) -> NoiseEntry:
    return NoiseEntry(**{f.name: getattr(row, f.name) for f in dataclasses.fields(NoiseEntry)})


def latest_noise(store: SqlStore, protocol_key: str) -> NoiseEntry | None:
    """The newest noise measurement of this protocol, if any."""
    found = noise_entries(store, 1, protocol_key)
    return found[0] if found else None


def noise_entries(store: SqlStore, limit: int = 20, protocol_key: str | None = None) -> list[NoiseEntry]:
    """The newest noise measurements (of one protocol, when given), newest first (`runs noise`)."""
    query = select(NoiseRow).order_by(NoiseRow.created_at.desc()).limit(limit)
    if protocol_key is not None:
        query = query.where(NoiseRow.protocol_key == protocol_key)
    with Session(store.engine) as s:
        return [_entry(r) for r in s.scalars(query)]
