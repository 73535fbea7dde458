"""pipeline/resolve.py: the choices a run's settings leave open are made once, beside the config,
which stays as asked; the run records both, and `--cfg job` shows the choices."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from mmlu_track.pipeline.resolve import resolve
from mmlu_track.settings.resolved import Resolved

from ..conftest import CliResult, compose_eval


def test_auto_threads_and_an_unset_mlflow_uri_are_chosen_and_the_config_keeps_what_was_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = compose_eval(["model=tiny", "threads=auto", "tracking.mlflow=true"])
    got = resolve(cfg, host_share=2)
    assert cfg.threads == "auto"
    assert cfg.tracking.mlflow_uri is None
    assert got.mlflow_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"  # made absolute where the command started
    assert got.threads is not None
    assert got.threads >= 1
    assert got.threads_why is not None
    assert "shared by 2 shards" in got.threads_why
    served = compose_eval(["model=openai_api", "model.base_url=http://127.0.0.1:1/v1", "model.served_name=m",
                           "model.revision=r", "tracking.mlflow=false"])  # fmt: skip
    off = replace(served, tracking=replace(served.tracking, mlflow_uri="http://h:5000"))
    assert resolve(off) == Resolved("http://h:5000", None, None)  # MLflow off: as given, for a later sync
    assert resolve(served) == Resolved(mlflow_uri=None, threads=None, threads_why=None)  # the server computes


def test_a_password_in_the_chosen_uri_is_never_shown() -> None:
    shown = Resolved("https://bob:s3cret@mlflow.example", 2, "threads=2")
    assert "s3cret" not in "\n".join(shown.lines())
    assert shown.to_json()["mlflow_uri"] == "https://bob:***@mlflow.example"


def test_cfg_job_shows_the_choices_under_the_config_as_asked(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    proc = cli("eval", "--cfg", "job", "model=tiny", "threads=auto", cwd=tmp_path)
    assert proc.code == 0, proc.err
    assert "threads: auto" in proc.out  # the setting, as asked
    said = proc.out.split("# resolved from the settings as this command starts", 1)[1]
    assert "#   threads_why: threads=auto:" in said
    assert f"#   mlflow_uri: sqlite:///{tmp_path / 'mlflow.db'}" in said
    assert list(tmp_path.iterdir()) == []  # shown, nothing run


@pytest.mark.usefixtures("mlflow_store")
def test_a_run_records_its_settings_as_asked_and_its_choices_beside_them(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline rewrote `threads` and `tracking.mlflow_uri` into the frozen config: the stored
    settings said `threads: 2` for a run asked `threads=auto`. Now the config is kept as asked and
    the choices are a record of their own, in results.json, the SQL record and MLflow's params."""
    import json

    from mlflow.tracking import MlflowClient

    from mmlu_track.store.sql import SqlStore

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = f"sqlite:///{tmp_path / 'store.db'}"
    got = cli("eval", "experiment=smoke", "device=cpu", "threads=auto", f"tracking.db_url={db}",
              f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)  # fmt: skip
    assert got.code == 0, got.err
    doc = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert doc["config"]["threads"] == "auto"
    assert doc["config"]["tracking"]["mlflow_uri"] is None
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert doc["resolved"]["mlflow_uri"] == uri
    assert doc["resolved"]["threads"] >= 1
    (run,) = SqlStore(db).runs()
    record = run.record
    assert record is not None
    assert record.start.resolved is not None
    assert record.start.mlflow_uri == uri  # where `runs sync` would send it
    assert record.start.config.threads == "auto"
    params = MlflowClient(tracking_uri=uri).get_run(str(run.mlflow_run_id)).data.params
    assert params["resolved.threads"] == str(doc["resolved"]["threads"])
    assert params["threads"] == "auto"


@pytest.mark.parametrize(
    ("override", "said"),
    [("threads=0", "threads=0 must be auto or a number"), ("threads=${oops}", "threads: Interpolation key")],
)
def test_cfg_job_with_a_bad_value_says_it_in_one_line(
    cli: Callable[..., CliResult], tmp_path: Path, override: str, said: str
) -> None:
    """The choices cannot be made from a value the run would refuse: one line, exit 2 (it was a
    traceback: the refusal looked for the run's folder, which --cfg never makes)."""
    proc = cli("eval", "--cfg", "job", "model=tiny", override, cwd=tmp_path)
    assert proc.code == 2
    (line,) = proc.errors
    assert said in line
    assert "Traceback" not in proc.err
    assert list(tmp_path.iterdir()) == []
