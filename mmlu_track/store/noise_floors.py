"""Noise measurements in the SQL store (`noise_floors`), as the store's `noise` member
(`SqlStore.noise`): saved by `python -m mmlu_track.noise`, found by the gate through the protocol of
the runs it compares, mirrored as an MLflow run of their own. The one mapping between a
`records.stored.NoiseEntry` and its row."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sqlalchemy import select, update

from mmlu_track.records.protocol import EvalProtocol
from mmlu_track.records.stored import NoiseEntry
from mmlu_track.store.db import Sessions
from mmlu_track.store.mirror import save_then_mirror
from mmlu_track.store.orm import NoiseRow

if TYPE_CHECKING:
    from mmlu_track.store.mlflow import NoiseRun


def _entry(row: NoiseRow) -> NoiseEntry:
    return NoiseEntry(**{f.name: getattr(row, f.name) for f in dataclasses.fields(NoiseEntry)})


class NoiseFloors:
    """The noise measurements of one SQL store (through its sessions: one connection, its checks)."""

    def __init__(self, sessions: Sessions) -> None:
        """`sessions`: the SQL store's own (`SqlStore._session`): its connection and its checks."""
        self._sessions = sessions

    def save(self, entry: NoiseEntry) -> None:
        """Insert the measurement's row, in one transaction (its id must be new)."""
        with self._sessions(True) as s:
            s.add(NoiseRow(**dataclasses.asdict(entry)))

    def set_mlflow(self, noise_id: str, mlflow_run_id: str) -> None:
        """Record `mlflow_run_id` as the MLflow run of the measurement `noise_id` (none: no change)."""
        with self._sessions(True) as s:
            s.execute(update(NoiseRow).where(NoiseRow.id == noise_id).values(mlflow_run_id=mlflow_run_id))

    def record(self, entry: NoiseEntry, run: NoiseRun | None) -> tuple[NoiseEntry, str | None]:
        """Save the measurement, then (with `run`: tracking.mlflow) mirror it as its MLflow run:
        the entry as stored, with its MLflow run where one was logged (MLflow down costs a warning,
        never the row), and that run's page where the store has a UI."""
        from mmlu_track.store.mlflow import log_noise

        logged = save_then_mirror(
            lambda: self.save(entry),
            (lambda: log_noise(run)) if run is not None else None,
            lambda logged: self.set_mlflow(entry.id, logged.id),
            "; the measurement is kept in the SQL store",
        )
        if logged is None:
            return entry, None
        return dataclasses.replace(entry, mlflow_run_id=logged.id), logged.url

    def latest(self, protocol: EvalProtocol) -> NoiseEntry | None:
        """The newest noise measurement of this prompt protocol, whichever questions it was measured
        on (one stored before prompt keys: of this very protocol), if any."""
        found = self.entries(1, (protocol.prompt_key(), protocol.key()))
        return found[0] if found else None

    def entries(self, limit: int = 20, protocol_keys: tuple[str, ...] | None = None) -> list[NoiseEntry]:
        """The newest noise measurements (under these keys, when given), newest first (`runs noise`)."""
        query = select(NoiseRow).order_by(NoiseRow.created_at.desc()).limit(limit)
        if protocol_keys is not None:
            query = query.where(NoiseRow.protocol_key.in_(protocol_keys))
        with self._sessions(False) as s:
            return [_entry(r) for r in s.scalars(query)]
