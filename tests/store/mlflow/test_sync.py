"""store/mlflow/sync.py: a run is synced to the MLflow it was recorded with: a stored URI's masked
password comes back from `MLFLOW_TRACKING_URI` (the same URI) or MLflow's own credentials, else one
line says how to give it; a finished run is logged in one go, its MLflow run reused."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mmlu_track.records.results import QuestionResult, aggregate
from mmlu_track.store.mlflow import MlflowUnavailable
from mmlu_track.store.mlflow.sync import log_run, uri_for_sync

from ...conftest import compose_eval, synthetic_record

STORED = "http://alice:***@mlflow.example:5000"


def test_a_stored_uris_password_comes_back_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    assert uri_for_sync(None) is None
    assert uri_for_sync("http://mlflow.example:5000") == "http://mlflow.example:5000"  # no password
    without = r"was recorded without its password: give it with --mlflow-uri"
    with pytest.raises(MlflowUnavailable, match=without):
        uri_for_sync(STORED)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://alice:pw-2@other.example:5000")  # another server
    with pytest.raises(MlflowUnavailable):
        uri_for_sync(STORED)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://alice:pw-2@mlflow.example:5000")
    assert uri_for_sync(STORED) == "http://alice:pw-2@mlflow.example:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw-2")
    assert uri_for_sync(STORED) == "http://mlflow.example:5000"  # MLflow sends its own credentials


def test_a_finished_run_is_logged_in_one_go_and_its_mlflow_run_reused(mlflow_server: str) -> None:
    results = [QuestionResult("anatomy", i, "h", 0, 1, False, None, "A", i % 2, 0, None) for i in range(4)]
    scores = aggregate(results)
    record = synthetic_record(uuid.uuid4().hex, compose_eval(["model=tiny"]), "m", "f" * 64, scores)
    experiment = f"sync-{uuid.uuid4().hex[:8]}"
    client = MlflowClient(tracking_uri=mlflow_server)
    existing = client.create_run(client.create_experiment(experiment)).info.run_id  # a live run's start
    logged = log_run(record, results, uri=mlflow_server, experiment=experiment, existing=existing)
    assert logged == existing
    run = client.get_run(logged)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["acc_micro"] == pytest.approx(0.5)


def test_an_unusable_store_is_one_mlflow_unavailable(tmp_path: Path) -> None:
    results = [QuestionResult("anatomy", 0, "h", 0, 1, False, None, "A", 0, 0, None)]
    record = synthetic_record("r" * 32, compose_eval(["model=tiny"]), "m", "f" * 64, aggregate(results))
    with pytest.raises(MlflowUnavailable, match="does not exist"):
        log_run(record, results, uri=f"sqlite:///{tmp_path / 'no' / 'm.db'}", experiment="x", existing=None)
