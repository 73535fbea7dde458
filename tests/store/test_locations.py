"""store/locations.py: where a run's stores are, made absolute once, so that every shard, job and
later `runs sync` reaches the same ones: the MLflow URI (the setting, else the environment's, else
MLflow's default), a relative SQLite file or local folder against the working folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmlu_track.store.locations import (
    MLFLOW_DEFAULT,
    absolute_path,
    absolute_sqlite,
    is_local_folder,
    missing_folder,
    mlflow_uri,
    sqlite_path,
)


def test_relative_sqlite_files_and_folders_are_made_absolute(tmp_path: Path) -> None:
    assert absolute_sqlite("sqlite:///runs.db", tmp_path) == f"sqlite:///{tmp_path / 'runs.db'}"
    ro = "sqlite:///file:runs.db?mode=ro&uri=true"  # SQLite's URI form keeps its query
    assert absolute_sqlite(ro, tmp_path) == f"sqlite:///file:{tmp_path / 'runs.db'}?mode=ro&uri=true"
    for given in ("sqlite:////abs/runs.db", "sqlite:///:memory:", "postgresql://h/db", "sqlite://"):
        assert absolute_sqlite(given, tmp_path) == given
    assert absolute_path("models/x", tmp_path) == str(tmp_path / "models" / "x")
    assert absolute_path("~/x", tmp_path) == "~/x"  # the same wherever a job runs
    assert absolute_path("org/model", tmp_path, only_existing=True) == "org/model"  # a hub id, maybe
    (tmp_path / "org" / "model").mkdir(parents=True)
    assert absolute_path("org/model", tmp_path, only_existing=True) == str(tmp_path / "org" / "model")


def test_the_mlflow_uri_is_the_setting_else_the_environments_else_mlflows_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert MLFLOW_DEFAULT == "sqlite:///mlflow.db"
    assert mlflow_uri(None, tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "./mlruns")
    assert mlflow_uri(None, tmp_path) == str(tmp_path / "mlruns")  # a local folder, made absolute
    assert mlflow_uri("http://u:pw@mlflow:5000", tmp_path) == "http://u:pw@mlflow:5000"
    monkeypatch.chdir(tmp_path)
    assert mlflow_uri("sqlite:///m.db") == f"sqlite:///{tmp_path / 'm.db'}"  # the working folder
    assert is_local_folder("./mlruns")
    assert not any(map(is_local_folder, ("file:///x", "databricks", "http://h", "sqlite:///m.db")))


def test_a_sqlite_mlflow_store_in_a_missing_folder_is_named_before_any_work(tmp_path: Path) -> None:
    assert sqlite_path(f"sqlite:///{tmp_path / 'm.db'}") == tmp_path / "m.db"
    assert sqlite_path("sqlite:///file:m.db?mode=ro") is None
    assert sqlite_path("http://h") is None
    assert missing_folder(f"sqlite:///{tmp_path / 'm.db'}") is None
    assert missing_folder(f"sqlite:///{tmp_path / 'nope' / 'm.db'}") == (
        f"the MLflow store's folder {tmp_path / 'nope'} does not exist: create it, or give "
        "tracking.mlflow_uri a file in an existing folder"
    )
