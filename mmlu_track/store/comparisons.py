"""Gate comparisons in the SQL store (`comparisons`), as the store's `comparisons` member
(`SqlStore.comparisons`): saved by the gate when it publishes a verdict, with the MLflow run that
mirrors it. The one mapping between a `records.stored.ComparisonEntry` and its row."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sqlalchemy import select

from mmlu_track.records.stored import ComparisonEntry, RecordedVerdict
from mmlu_track.store.db import Sessions
from mmlu_track.store.mirror import save_then_mirror
from mmlu_track.store.orm import ComparisonRow

if TYPE_CHECKING:
    from mmlu_track.store.mlflow import ComparisonRun, Logged


class Comparisons:
    """The comparisons of one SQL store (through its sessions: one connection, its checks)."""

    def __init__(self, sessions: Sessions) -> None:
        """Comparisons read and written through the store's `sessions`."""
        self._sessions = sessions

    def save(self, entry: ComparisonEntry) -> None:
        """Add the comparison's row (its id is new: a verdict is never overwritten)."""
        with self._sessions(True) as s:
            s.add(ComparisonRow(**dataclasses.asdict(entry)))

    def latest(self, candidate_run_id: str, mode: str) -> RecordedVerdict | None:
        """The newest verdict of `mode` recorded with `candidate_run_id` as its candidate, if any."""
        query = (
            select(ComparisonRow)
            .where(ComparisonRow.candidate_run_id == candidate_run_id, ComparisonRow.mode == mode)
            .order_by(ComparisonRow.created_at.desc())
            .limit(1)
        )
        with self._sessions(False) as s:
            row = s.scalars(query).first()
            if row is None:
                return None
            fields = {f.name: getattr(row, f.name) for f in dataclasses.fields(ComparisonEntry)}
        return RecordedVerdict.of(ComparisonEntry(**fields))

    def set_mlflow(self, comparison_id: str, mlflow_run_id: str) -> None:
        """Link the comparison's row to the MLflow run that mirrors it."""
        with self._sessions(True) as s:
            s.get_one(ComparisonRow, comparison_id).mlflow_run_id = mlflow_run_id

    def record(self, entry: ComparisonEntry, run: ComparisonRun | None) -> Logged | None:
        """Save the verdict, then (with `run`: tracking.mlflow) mirror it as its MLflow run; that
        run, or None (MLflow off, or down: a warning, the verdict kept)."""
        from mmlu_track.store.mlflow import log_comparison

        return save_then_mirror(
            lambda: self.save(entry),
            (lambda: log_comparison(run)) if run is not None else None,
            lambda logged: self.set_mlflow(entry.id, logged.id),
            "; the comparison is kept in the SQL store",
        )
