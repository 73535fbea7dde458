"""store/comparisons.py: a gate's verdict saved as a row of its own (never over another), then
linked to the MLflow run that mirrors it; with MLflow off, saved and nothing more."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from mmlu_track.records.protocol import RecordError
from mmlu_track.records.stored import ComparisonEntry, RecordedVerdict
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


def test_the_latest_verdict_of_a_candidate_is_read_back_and_an_unreadable_one_refused(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        base, cand = (synthetic_run(store, "m", {"anatomy": [True]}) for _ in "bc")
        said = '{"verdict": {"headline": "%s", "exit_code": %d}}'
        older = replace(_entry(base, cand), mode="sequential", report_json=said % ("old", 0))
        store.comparisons.save(older)
        newer = replace(older, id="d" * 32, verdict="regression", report_json=said % ("a drop", 1),
                        created_at=datetime(2025, 6, 1))  # fmt: skip
        store.comparisons.save(newer)
        store.comparisons.save(replace(newer, id="e" * 32, mode="gate", created_at=datetime(2026, 1, 1)))
        kept = store.comparisons.latest(cand, "sequential")
        assert kept == RecordedVerdict("d" * 32, base, cand, "regression", "a drop", 1)
        assert store.comparisons.latest(base, "sequential") is None  # only as the candidate
        store.comparisons.save(replace(newer, id="f" * 32, report_json="{}", created_at=datetime(2027, 1, 1)))
        unreadable = f"comparison {'f' * 32} was recorded without a readable verdict"
        with pytest.raises(RecordError, match=unreadable):
            store.comparisons.latest(cand, "sequential")
    finally:
        store.close()
