"""gate/publish.py: the comparison's reports written, never over another comparison's; its record
in the SQL store (MLflow off: none logged); its MLflow metrics say what the verdict rests on, p = 0
included."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mmlu_track.store.sql import SqlStore

from ..conftest import CliResult, synthetic_run
from .conftest import Decide


@pytest.mark.usefixtures("mlflow_store")
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


def test_the_reports_are_written_beside_none_they_would_overwrite_and_the_verdict_recorded(
    decide: Decide, tmp_path: Path
) -> None:
    import json

    from sqlalchemy import create_engine, text

    from mmlu_track.gate.publish import comparison_metrics, record_verdict, render

    store, outcome = decide({"anatomy": [True] * 30}, {"anatomy": [True] * 20 + [False] * 10})
    first = render(outcome, tmp_path / "reports")
    assert first.folder == tmp_path / "reports"
    assert {p.name for p in first.folder.iterdir()} == {"report.md", "report.json", "deltas.png"}
    assert json.loads((first.folder / "report.json").read_text()) == json.loads(json.dumps(first.doc))
    assert (first.folder / "report.md").read_text() == first.markdown
    assert outcome.verdict.headline in first.markdown
    second = render(outcome, tmp_path / "reports")  # the same folder again: a subfolder of its own
    assert second.folder == tmp_path / "reports" / f"compare-{outcome.cand.id[:12]}-vs-{outcome.base.id[:12]}"
    assert second.comparison_id != first.comparison_id

    assert record_verdict(store, outcome, first) is None  # MLflow off: no page
    with create_engine(store.url).connect() as conn:
        row = conn.execute(text("SELECT id, verdict, mlflow_run_id, delta_micro FROM comparisons")).one()
    assert tuple(row) == (first.comparison_id, outcome.verdict.status, None, outcome.comp.micro.delta)
    metrics = comparison_metrics(outcome)
    assert list(metrics)[:4] == [
        "gate/delta_micro_pts", "gate/ci_low_micro_pts", "gate/ci_high_micro_pts", "gate/lower_bound_pts",
    ]  # fmt: skip
    assert metrics["gate/lost"] == 10.0
    assert metrics["gate/exit_code"] == float(outcome.verdict.exit_code)
