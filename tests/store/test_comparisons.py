"""store/comparisons.py: a gate's verdict saved as a row of its own (never over another), then
linked to the MLflow run that mirrors it; with MLflow off, saved and nothing more."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from mmlu_track.records.stored import ComparisonEntry
from mmlu_track.store.comparisons import Comparisons
from mmlu_track.store.db import StoreError
from mmlu_track.store.sql import SqlStore

from ..conftest import synthetic_run


def _entry(base: str, cand: str) -> ComparisonEntry:
    return ComparisonEntry(
        id="c" * 32, baseline_run_id=base, candidate_run_id=cand, mode="gate", policy="default",
        verdict="pass", delta_micro=0.01, delta_macro=0.02, p_regression=None, p_noninferiority=0.001,
        margin=0.01, n_flagged=0, report_json='{"verdict": "pass"}', created_at=datetime(2025, 5, 1),
    )  # fmt: skip


def _rows(url: str) -> list[tuple[object, ...]]:
    with create_engine(url).connect() as conn:
        query = "SELECT id, verdict, p_regression, mlflow_run_id FROM comparisons ORDER BY id"
        return [tuple(r) for r in conn.execute(text(query))]


def test_a_verdict_is_saved_once_and_linked_to_its_mlflow_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(url)
    try:
        assert isinstance(store.comparisons, Comparisons)
        entry = _entry(*(synthetic_run(store, "m", {"anatomy": [True]}) for _ in "bc"))
        assert store.comparisons.record(entry, None) is None  # MLflow off: saved, nothing logged
        assert _rows(url) == [("c" * 32, "pass", None, None)]
        with pytest.raises(StoreError):
            store.comparisons.save(replace(entry, verdict="regression"))  # its id again: never overwritten
        store.comparisons.save(replace(entry, id="d" * 32, verdict="regression", p_regression=0.0))
        store.comparisons.set_mlflow("c" * 32, "mlflow-9")
        assert _rows(url) == [("c" * 32, "pass", None, "mlflow-9"), ("d" * 32, "regression", 0.0, None)]
    finally:
        store.close()
