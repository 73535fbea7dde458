"""store/mlflow/comparison.py: a decided comparison and a noise measurement as MLflow runs of their
own, read back from a real `mlflow server`: the verdict as a tag and its colour, the description,
params, metrics, report files, a link from the candidate's run; the noise run's evaluations as
params; an unreachable server one `MlflowUnavailable`."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mmlu_track.store.mlflow import ComparisonRun, MlflowUnavailable, NoiseRun, Target
from mmlu_track.store.mlflow.comparison import NOISE_ID_TAG, VERDICT_TAG, log_comparison, log_noise
from mmlu_track.store.mlflow.live import GATE_TAG, KIND_TAG
from mmlu_track.store.mlflow.pages import NOTE_TAG
from mmlu_track.store.mlflow.views import RUN_COLOR_TAG, VERDICT_COLORS

from ...serve import free_port


def test_a_comparison_is_its_own_run_linked_from_the_candidates(mlflow_server: str, tmp_path: Path) -> None:
    experiment = f"cmp-{uuid.uuid4().hex[:8]}"
    client = MlflowClient(tracking_uri=mlflow_server)
    candidate = client.create_run(client.create_experiment(experiment)).info.run_id
    report = tmp_path / "report.md"
    report.write_text("# REGRESSION\n")
    logged = log_comparison(
        ComparisonRun(
            Target(mlflow_server, experiment), "regression: m vs m", "regression", "REGRESSION: a drop",
            params={"baseline_run": "b" * 32}, metrics={"gate/lost": 12.0, "gate/delta_micro_pts": -1.23456},
            files=[report], candidate=(candidate, "REGRESSION, Δ micro -1.23 pts"),
        )
    )  # fmt: skip
    run = client.get_run(logged.id)
    tags = run.data.tags
    assert (tags[VERDICT_TAG], tags[KIND_TAG]) == ("regression", "comparison")
    assert tags[NOTE_TAG] == "REGRESSION: a drop"
    assert tags[RUN_COLOR_TAG] == VERDICT_COLORS["regression"]
    assert run.data.params == {"baseline_run": "b" * 32}
    assert run.data.metrics["gate/lost"] == 12.0
    assert run.info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(logged.id)] == ["report.md"]
    assert logged.url is not None
    assert logged.url.endswith(f"/runs/{logged.id}?workflowType=machine_learning")
    linked = client.get_run(candidate).data.tags
    assert linked[GATE_TAG] == f"REGRESSION, Δ micro -1.23 pts (comparison run {logged.id})"


def test_a_noise_measurement_names_its_evaluations(mlflow_server: str) -> None:
    experiment = f"noise-{uuid.uuid4().hex[:8]}"
    logged = log_noise(
        NoiseRun(
            Target(mlflow_server, experiment), "noise m n=40", "n" * 32, "This evaluation's own noise ...",
            runs={"reference": "r" * 32, "batching (1, None)": "q" * 32},
            metrics={"flip_rate/batching (1, None)": 0.025, "n": 40.0},
        )
    )  # fmt: skip
    run = MlflowClient(tracking_uri=mlflow_server).get_run(logged.id)
    assert (run.data.tags[KIND_TAG], run.data.tags[NOISE_ID_TAG]) == ("noise", "n" * 32)
    assert run.data.params == {"run/reference": "r" * 32, "run/batching": "q" * 32}
    assert run.data.metrics == {"flip_rate/batching": 0.025, "n": 40.0}


def test_an_unreachable_server_is_one_mlflow_unavailable() -> None:
    target = Target(f"http://127.0.0.1:{free_port()}", "x")
    with pytest.raises(MlflowUnavailable, match=r"is unreachable"):
        log_noise(NoiseRun(target, "noise", "n" * 32, "", runs={}, metrics={}))
