"""What a launched job needs to know about where it runs (`mmlu_track/commands/launchers.py`) and the
scheduler's word on liveness (`store/liveness.py`); the real schedulers are in
test_launchers_clusters.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mmlu_track.commands.launchers import anchored, anchored_dir
from mmlu_track.store.liveness import Owner, liveness, scheduler, slurm_job_gone
from mmlu_track.store.locations import mlflow_uri


def test_relative_paths_are_anchored_at_the_launch_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "models" / "mine").mkdir(parents=True)
    raw = {
        "tracking": {"db_url": "sqlite:///runs/mmlu_track.db?timeout=5", "mlflow": True, "mlflow_uri": None},
        "cache_dir": "cache",
        "data": {"source": "local", "path": "mmlu_local"},
        "model": {"name_or_path": "models/mine", "tokenizer": "HuggingFaceTB/SmolLM2-135M"},
    }
    got = anchored(raw, tmp_path)
    assert got["tracking"]["db_url"] == f"sqlite:///{tmp_path}/runs/mmlu_track.db?timeout=5"
    assert got["tracking"]["mlflow_uri"] is None  # unset, as asked: chosen as the command starts,
    from mmlu_track.pipeline.resolve import resolve  # anchored at the same folder (a job's own may differ)
    from mmlu_track.settings.checks import eval_config_from_dict

    from ..conftest import compose_raw

    typed = eval_config_from_dict(anchored(compose_raw(["model=tiny"]), tmp_path))
    assert resolve(typed, launch_dir=tmp_path).mlflow_uri == f"sqlite:///{tmp_path}/mlflow.db"  # pinned
    relative = anchored({**raw, "tracking": {**raw["tracking"], "mlflow_uri": "sqlite:///ml/m.db"}}, tmp_path)
    assert relative["tracking"]["mlflow_uri"] == f"sqlite:///{tmp_path}/ml/m.db"  # given: anchored as a path
    assert got["cache_dir"] == str(tmp_path / "cache")
    assert got["data"]["path"] == str(tmp_path / "mmlu_local")
    assert got["model"]["name_or_path"] == str(tmp_path / "models" / "mine")  # a folder there
    assert got["model"]["tokenizer"] == "HuggingFaceTB/SmolLM2-135M"  # a hub id: no such folder
    assert raw["tracking"]["db_url"] == "sqlite:///runs/mmlu_track.db?timeout=5"  # the input is kept
    uri_form = {**raw, "tracking": {**raw["tracking"], "db_url": "sqlite:///file:s.db?mode=ro&uri=true"}}
    assert (
        anchored(uri_form, tmp_path)["tracking"]["db_url"]
        == f"sqlite:///file:{tmp_path}/s.db?mode=ro&uri=true"
    )


@pytest.mark.parametrize(
    ("db_url", "mlflow_uri"),
    [
        ("sqlite:////abs/s.db", "http://u:pw@mlflow:5000"),
        ("postgresql+psycopg://u:pw@db/mmlu", "file:///abs/mlruns"),
        ("sqlite://", "databricks"),
        ("sqlite:///file:/abs/s.db?mode=ro&uri=true", "sqlite:////abs/mlflow.db"),
    ],
)
def test_absolute_paths_and_servers_are_left_as_given(db_url: str, mlflow_uri: str) -> None:
    raw = {"tracking": {"db_url": db_url, "mlflow": True, "mlflow_uri": mlflow_uri},
           "cache_dir": "~/.cache/x", "data": {"source": "hub", "path": "cais/mmlu"},
           "model": {"name_or_path": None}}  # fmt: skip
    got = anchored(raw, Path("/launch"))
    assert got == raw
    assert anchored_dir("multirun/x", Path("/launch")) == Path("/launch/multirun/x")
    assert anchored_dir("/elsewhere/x", Path("/launch")) == Path("/elsewhere/x")


def test_the_mlflow_uri_is_resolved_in_one_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Configured, else the environment's, else MLflow's default; relative stores anchored."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert mlflow_uri(None, tmp_path) == f"sqlite:///{tmp_path}/mlflow.db"
    assert mlflow_uri("runs/ml.db", tmp_path) == str(tmp_path / "runs" / "ml.db")  # a folder store
    assert mlflow_uri("sqlite:///x/ml.db", tmp_path) == f"sqlite:///{tmp_path}/x/ml.db"
    assert mlflow_uri("https://u:p@host/", tmp_path) == "https://u:p@host/"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///env.db")
    assert mlflow_uri(None, tmp_path) == f"sqlite:///{tmp_path}/env.db"
    assert mlflow_uri("databricks", tmp_path) == "databricks"
    monkeypatch.chdir(tmp_path)
    assert mlflow_uri(None) == f"sqlite:///{tmp_path}/env.db"  # default base: the working directory


def test_a_claim_by_an_earlier_attempt_of_this_very_scheduler_task_is_dead_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SLURM requeue (or a Ray retry) runs the same job (task) again, on any node: the claim it
    finds, made by the attempt before on another host, beat a second ago and would be waited for."""
    for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    assert scheduler() is None
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert scheduler() == "slurm:4242.0"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4240")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert scheduler() == "slurm:4240_2.0"
    now = datetime.now(UTC).replace(tzinfo=None)
    other = str(Owner("node7", 1234, "555", "boot"))
    minute = timedelta(seconds=150)
    why = liveness(other, now, now, minute, "slurm:4240_2.0")
    assert why is not None
    assert "earlier attempt of slurm:4240_2.0" in why
    assert liveness(other, now, now, minute, "slurm:4240_3.0") is None  # another task: alive by its beat
    assert liveness(other, now, now, minute, None) is None
    assert liveness(other, now - 2 * minute, now, minute, None) is not None


def test_squeue_is_asked_only_for_slurm_claims_and_its_silence_decides_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert slurm_job_gone(None) is None
    assert slurm_job_gone("ray:abc") is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue: heartbeats decide
    assert slurm_job_gone("slurm:12.0") is None


def test_runs_show_lists_each_shard_with_its_process_and_scheduler_task(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    from mmlu_track.store.liveness import Shard
    from mmlu_track.store.sql import SqlStore

    from ..conftest import synthetic_start

    store = SqlStore(sqlite_url)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_PROCID", "0")
    run_id, _ = store.start_or_resume(synthetic_start(), "identity-x", Shard(1, 2))
    got = cli("runs", "--db", sqlite_url, "show", run_id, cwd=tmp_path)
    assert got.code == 0, got.err
    (line,) = [x for x in got.out.splitlines() if x.startswith("shard ")]
    assert line.startswith("shard 1 of 2  running  process ")
    assert "scheduler slurm:77.0  last beat " in line


def test_an_unfinished_run_is_listed_in_the_dtype_it_was_loaded_in(
    sqlite_url: str, tmp_path: Path, cli: Any
) -> None:
    """`dtype=auto` (the default) resolves as the model loads: a running or stopped run has no record
    yet, and was listed as `auto`."""
    from mmlu_track.store.sql import SqlStore

    from ..conftest import synthetic_start

    SqlStore(sqlite_url).start_or_resume(synthetic_start(), "identity-y")  # loaded in float32
    got = cli("runs", "--db", sqlite_url, "list", cwd=tmp_path)
    assert got.code == 0, got.err
    (row,) = [x for x in got.out.splitlines()[1:] if "running" in x]
    assert " float32 " in row
    assert " auto " not in row
