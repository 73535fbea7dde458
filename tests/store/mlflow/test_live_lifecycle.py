"""The MLflow run lives with the evaluation: open while scoring, one metric per finished subject,
ended FINISHED / FAILED / KILLED, and continued (the same MLflow run) when the evaluation resumes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from mmlu_track.eval.scoring import SCORERS
from mmlu_track.pipeline import evaluate as pipeline
from mmlu_track.store.mlflow.live import RUN_ID_TAG
from mmlu_track.store.mlflow.pages import shown
from mmlu_track.store.sql import SqlStore

from ... import processes
from ...conftest import tiny_run_cfg

SUBJECTS = "[high_school_psychology,professional_law,miscellaneous,moral_scenarios]"


def _only_run(client: MlflowClient, experiment: str) -> Any:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) <= 1, "one evaluation, one MLflow run"
    return runs[0] if runs else None


@pytest.mark.slow  # two interpreters, the first paced to be killed mid-run, watched through MLflow: ~17 s
def test_a_run_is_live_is_killed_by_sigterm_and_resumes_into_the_same_mlflow_run(
    tmp_path: Path, mlflow_store: str
) -> None:
    db, mlflow_uri = f"sqlite:///{tmp_path / 'store.db'}", mlflow_store  # MLflow's tables made already
    cmd = [
        "-m", "mmlu_track", "experiment=smoke", "model=fake", "device=cpu", "k=2", f"subjects={SUBJECTS}",
        "limit=100", "batch_size=4", f"tracking.db_url={db}", f"tracking.mlflow_uri={mlflow_uri}",
        "tracking.experiment=live",
    ]  # fmt: skip
    env = {**os.environ, "HYDRA_FULL_ERROR": ""}
    client = MlflowClient(tracking_uri=mlflow_uri)
    assert _only_run(client, "live") is None
    paced = [*cmd, "model.fake_seconds_per_question=0.02", f"hydra.run.dir={tmp_path / 'first'}"]
    first = processes.Popen(paced, cwd=tmp_path, env=env)
    deadline = time.time() + 240
    while True:  # watch it as a user would: a RUNNING run whose accuracy so far grows subject by subject
        assert first.poll() is None, f"finished before it could be watched: {first.communicate()}"
        assert time.time() < deadline, "no subject reached MLflow in time"
        if (
            (live := _only_run(client, "live")) is not None
            and os.path.exists(tmp_path / "mlflow.db")
            and "progress/acc_micro" in live.data.metrics
        ):
            break
        time.sleep(0.2)
    assert live.info.status == "RUNNING"
    assert live.data.params["k"] == "2"  # params are there from the start
    assert "acc_micro" not in live.data.metrics
    mlflow_id = live.info.run_id
    first.send_signal(signal.SIGTERM)  # what a scheduler or `kill` sends
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 143
    assert "mmlu_track: terminated (SIGTERM); run the same command to resume" in stderr
    killed = client.get_run(mlflow_id)
    assert killed.info.status == "KILLED", stderr
    store = SqlStore(db)
    (stored,) = store.runs()
    assert stored.status == "failed"  # resumable
    assert stored.mlflow_run_id == mlflow_id
    assert store.runs(unsynced=True) == []  # unfinished: nothing to sync yet

    # The same command again, at full speed (the pace is outside a run's identity).
    second = processes.run([*cmd, f"hydra.run.dir={tmp_path / 'second'}"], cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    assert "resuming run" in second.stdout
    done = _only_run(client, "live")  # the same MLflow run, not a second one
    assert done is not None
    assert done.info.run_id == mlflow_id
    assert done.info.status == "FINISHED"
    metrics = done.data.metrics
    assert {"acc/professional_law", "acc/moral_scenarios", "acc_micro"} <= set(metrics)
    finished = store.get(stored.id)
    assert finished is not None
    assert finished.acc_micro == pytest.approx(metrics["acc_micro"])
    assert finished.mlflow_synced_at is not None
    progress = client.get_metric_history(mlflow_id, "progress/acc_micro")
    assert sorted(m.step for m in progress)[-1] == 4  # the running accuracy, one point per subject
    assert done.data.tags[RUN_ID_TAG] == stored.id


@pytest.mark.usefixtures("mlflow_store")
def test_a_failing_evaluation_ends_its_mlflow_run_failed_and_a_rerun_finishes_it(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = tiny_run_cfg(
        sqlite_url,
        "tracking.mlflow=true",
        f"tracking.mlflow_uri={mlflow_uri}",
        "tracking.experiment=f",
        model="tiny",  # its scorer is what breaks
    )
    real = SCORERS["logprob"]
    calls: list[int] = []

    def second_subject_breaks(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA error: device-side assert triggered")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setitem(SCORERS, "logprob", second_subject_breaks)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="device-side assert"):
        pipeline.run(cfg, tmp_path / "a", display=pipeline.QUIET)
    client = MlflowClient(tracking_uri=mlflow_uri)
    failed = _only_run(client, "f")
    assert failed is not None
    assert failed.info.status == "FAILED"
    # the first subject's progress; its accuracy and every other metric come with the finished run,
    # after the headline (MLflow lists metrics in the order logged)
    assert failed.data.metrics["progress/questions"] == 3
    assert not [k for k in failed.data.metrics if k.startswith("acc")]

    monkeypatch.setitem(SCORERS, "logprob", real)
    out = pipeline.run(cfg, tmp_path / "b", display=pipeline.QUIET)
    assert out.mlflow_run_id == failed.info.run_id
    assert client.get_run(out.mlflow_run_id).info.status == "FINISHED"
    done = client.get_run(out.mlflow_run_id).data.metrics
    assert done["acc/anatomy"] == shown("acc/anatomy", out.scores.subjects["anatomy"].acc)
