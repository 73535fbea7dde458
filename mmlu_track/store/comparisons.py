"""Gate comparisons in the SQL store (`comparisons`), as the store's `comparisons` member
(`SqlStore.comparisons`): saved by the gate when it publishes a verdict, with the MLflow run that
mirrors it. The one mapping between a `records.stored.ComparisonEntry` and its row."""

from __future__ import annotations

import dataclasses

from mmlu_track.records.stored import ComparisonEntry
from mmlu_track.store.db import Sessions
from mmlu_track.store.orm import ComparisonRow


class Comparisons:
    """The comparisons of one SQL store (through its sessions: one connection, its checks)."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    def save(self, entry: ComparisonEntry) -> None:
        with self._sessions(True) as s:
            s.add(ComparisonRow(**dataclasses.asdict(entry)))

    def set_mlflow(self, comparison_id: str, mlflow_run_id: str) -> None:
        with self._sessions(True) as s:
            s.get_one(ComparisonRow, comparison_id).mlflow_run_id = mlflow_run_id
