"""gate/publish.py: the comparison's MLflow metrics say what the verdict rests on, p = 0 included."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mmlu_track.store.sql import SqlStore

from ..conftest import CliResult, synthetic_run


def test_a_total_regression_is_logged_with_p_zero_not_one(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """`p_regression or 1.0` logged a p of exactly 0 as 1: a total regression read "p = 1" in MLflow."""
    from mlflow.tracking import MlflowClient

    db, uri = f"sqlite:///{tmp_path / 'store.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = SqlStore(db)
    base = synthetic_run(store, "m", {"anatomy": [True] * 1100})
    cand = synthetic_run(store, "m", {"anatomy": [False] * 1100})
    proc = cli("compare", f"baseline={base}", f"candidate={cand}", f"tracking.db_url={db}",
               "tracking.mlflow=true", f"tracking.mlflow_uri={uri}", f"hydra.run.dir={tmp_path / 'r'}",
               cwd=tmp_path)  # fmt: skip
    assert proc.code == 1, proc.err
    store.close()
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], "tags.verdict = 'regression'"
    )
    assert run.data.metrics["gate/p_regression"] == 0.0
