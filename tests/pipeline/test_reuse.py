"""The same command again takes its finished run, before the model loads (`pipeline.reuse`, with
the weights pinned by `eval.pins`); tracking.rerun=true scores again as a run of its own."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mmlu_track.eval import load
from mmlu_track.pipeline.evaluate import QUIET, Display, run
from mmlu_track.pipeline.reuse import reused_line
from mmlu_track.store.sql import SqlStore

from ..conftest import CliResult, tiny_run_cfg

Cli = Callable[..., CliResult]

SMOKE = ["experiment=smoke", "model=fake", "device=cpu"]


def _no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(load, "load_backend", refuse)


@pytest.mark.usefixtures("mlflow_store")
def test_the_same_command_again_takes_its_finished_run_without_loading_the_model(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-run CI job: one line naming the run (id, name, accuracy, its folder, how to score again),
    exit 0, no new SQL row, no new MLflow run, no output folder left behind."""
    first = cli("eval", *SMOKE, cwd=tmp_path)
    assert first.code == 0, first.err
    store = SqlStore(f"sqlite:///{tmp_path / 'mmlu_track.db'}")
    (stored,) = store.runs()
    folders = sorted((tmp_path / "outputs").glob("*/*"))
    _no_model(monkeypatch)
    again = cli("eval", *SMOKE, "batch_size=1", cwd=tmp_path)  # batching changes no score
    assert again.code == 0, again.err
    (line,) = [x for x in again.out.splitlines() if x.startswith("already evaluated")]
    record = json.loads((Path(stored.output_dir or "") / "results.json").read_text())
    accuracy = f"{100 * record['scores']['micro']['acc']:.2f} %"
    assert f"run {stored.id} (fake-model@seed0" in line
    assert accuracy in line
    assert str(stored.output_dir) in line
    assert "tracking.rerun=true" in line
    assert [r.id for r in store.runs()] == [stored.id]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert len(client.search_runs([client.get_experiment_by_name("mmlu_track_smoke").experiment_id])) == 1
    assert sorted((tmp_path / "outputs").glob("*/*")) == folders


@pytest.mark.usefixtures("mlflow_store")
def test_rerun_scores_again_as_a_run_told_apart_and_other_settings_are_another_run(
    cli: Cli, tmp_path: Path
) -> None:
    assert cli("eval", *SMOKE, cwd=tmp_path).code == 0
    rerun = cli("eval", *SMOKE, "tracking.rerun=true", cwd=tmp_path)
    assert rerun.code == 0, rerun.err
    assert "already evaluated" not in rerun.out
    store = SqlStore(f"sqlite:///{tmp_path / 'mmlu_track.db'}")
    second, first = (r.id for r in store.runs())  # newest first
    # A model name takes the newest finished run but the other side's own, and says which it took.
    compared = cli("compare", "baseline=fake-model", f"candidate={second}", cwd=tmp_path)
    assert compared.code in (0, 1), compared.err
    assert f"(candidate run {second[:12]}, baseline run {first[:12]})" in compared.out
    other = cli("eval", *SMOKE, "limit=2", cwd=tmp_path)  # another identity: scored, not reused
    assert other.code == 0
    assert "already evaluated" not in other.out
    assert len(store.runs()) == 3
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("mmlu_track_smoke").experiment_id
    names = sorted(r.info.run_name for r in client.search_runs([experiment]))
    assert sum(n.startswith("rerun: ") for n in names) == 1  # MLflow's list tells the twins apart
    assert len(set(names)) == 3


def test_an_interrupted_run_resumes_and_a_fresh_identity_never_reuses(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    cfg = tiny_run_cfg(db)
    first = run(cfg, tmp_path / "a", display=QUIET)
    said: list[str] = []
    again = run(cfg, tmp_path / "b", display=Display(said.append, progress=False))
    assert again.reused
    assert again.run_id == first.run_id
    assert again.results == first.results
    stored = SqlStore(db).get(first.run_id)
    assert stored is not None
    assert said == [reused_line(stored)]
    assert said[0].startswith(f"already evaluated: run {first.run_id}")
    fresh = run(tiny_run_cfg(db, "tracking.resume=false"), tmp_path / "c", display=QUIET)
    assert not fresh.reused
    assert fresh.run_id != first.run_id
