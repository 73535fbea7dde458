"""The gate folder's fixtures: two synthetic runs in a real SQLite store, decided as the compare
command decides them (`gate.run.resolve_pair`, `paired`, `decided`), for the tests of what reads a
decided comparison (`Outcome`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mmlu_track.gate.outcome import Outcome
from mmlu_track.gate.run import decided, paired, resolve_pair
from mmlu_track.settings.config import CompareConfig, CompareMode, GateConfig, TrackingConfig
from mmlu_track.store.sql import SqlStore

from ..conftest import synthetic_run

Correct = dict[str, list[bool]]
Decide = Callable[..., tuple[SqlStore, Outcome]]


@pytest.fixture
def decide(tmp_path: Path) -> Iterator[Decide]:
    """`decide(base, cand, mode=..., cand_k=..., mlflow_uri=...)`: the store (tmp_path/store.db) and
    the decided comparison of a run of model `m` answering `base` and one answering `cand` (no
    bootstrap: 0 resamples; MLflow only where `mlflow_uri` is given)."""
    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(db)

    def make(
        base: Correct, cand: Correct, *, mode: CompareMode = "gate", cand_k: int = 5,
        mlflow_uri: str | None = None,
    ) -> tuple[SqlStore, Outcome]:  # fmt: skip
        b, c = synthetic_run(store, "m", base), synthetic_run(store, "m", cand, k=cand_k)
        tracking = TrackingConfig(db_url=db, mlflow=mlflow_uri is not None, mlflow_uri=mlflow_uri)
        cfg = CompareConfig(b, c, GateConfig("default", bootstrap_resamples=0), tracking, mode=mode)
        base_run, cand_run = resolve_pair(store, cfg)
        pairs = paired(store, cfg, base_run, cand_run)
        return store, decided(store, cfg, base_run, cand_run, pairs, None)

    yield make
    store.close()
