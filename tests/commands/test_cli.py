"""The command line as a user runs it, through the real entry point (in-process), on the tiny model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ..conftest import ROOT, CliResult

Cli = Callable[..., CliResult]


def _cli(cli: Cli, *args: str, cwd: Path) -> CliResult:
    """`python -m mmlu_track ARGS` run from `cwd`, in-process."""
    return cli("eval", *args, cwd=cwd)


@pytest.mark.usefixtures("mlflow_store")
def test_end_to_end_run_writes_results_and_is_reproducible(cli: Cli, tmp_path: Path) -> None:
    outs = []
    for name in ("a", "b"):  # scored again on purpose: the same command alone would take the first run
        proc = _cli(cli, "experiment=smoke", "device=cpu", f"hydra.run.dir={tmp_path / name}",
                    f"tracking.rerun={name == 'b'}", cwd=tmp_path)  # fmt: skip
        assert proc.code == 0, proc.err
        assert "micro average" in proc.out
        outs.append(tmp_path / name)
    record = json.loads((outs[0] / "results.json").read_text())
    assert record["config"]["model"]["source"] == "tiny"
    assert record["data"]["n_questions"] == 6
    assert len(record["data"]["fingerprint"]) == 64
    assert record["prompt"]["template_hash"]
    assert record["prompt"]["shots_used"] == {"2": 6}
    assert record["seeds"]["torch"] == 1234
    assert record["versions"]["transformers"]
    assert set(record["scores"]["subjects"]) == {"abstract_algebra", "anatomy"}
    rows = [json.loads(line) for line in (outs[0] / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert {"subject", "index", "prompt_hash", "logprobs", "prediction", "gold", "correct"} <= set(rows[0])
    # Same config, same results, question by question.
    assert (outs[0] / "predictions.jsonl").read_text() == (outs[1] / "predictions.jsonl").read_text()
    assert (outs[0] / ".hydra" / "config.yaml").is_file()
    # Recorded with the default tracking: the project's SQLite file and MLflow's default store.
    from mlflow.tracking import MlflowClient

    from mmlu_track.store.sql import SqlStore

    store = SqlStore(f"sqlite:///{tmp_path / 'mmlu_track.db'}")
    stored = store.runs()
    assert len(stored) == 2
    assert all(r.status == "finished" and r.mlflow_run_id for r in stored)
    assert len(store.question_results(record["run_id"])) == 6
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    logged = client.get_run(next(r.mlflow_run_id for r in stored if r.id == record["run_id"]))
    assert logged.data.metrics["acc_micro"] == pytest.approx(record["scores"]["micro"]["acc"], rel=1e-3)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["model=tiny", "k=9"], 2, "mmlu_track: error: k=9 is impossible"),
        (["model=tiny", "subjects=[anatomy,astrology]"], 2, "unknown subject 'astrology'"),
        (["model=hf_hub"], 2, "Missing mandatory value: model.name_or_path"),
        # Hydra's own composition errors exit 2 as well: only a release gate exits 1.
        (["model=gpt5"], 2, "Could not find 'model/gpt5'"),
        (["model=tiny", "margin=0.02"], 2, "unknown key 'margin': did you mean gate.margin?"),
        (["model=tiny", "scoring.methd=logprob"], 2, "did you mean scoring.method?"),
        # {missing}: a path under the test's own folder, never there (a machine may have /nonexistent)
        (["model=tiny", "data=local", "data.path={missing}"], 2, "MMLU folder {missing} does not exist"),
        (["model=hf_hub", "model.name_or_path={missing}/model"], 2, "could not load model"),
    ],
)
def test_bad_input_is_one_clear_message(
    cli: Cli, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    missing = tmp_path / "missing"
    args, message = [a.format(missing=missing) for a in args], message.format(missing=missing)
    proc = _cli(cli, *args, f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert proc.code == code
    assert message in proc.err
    assert "Traceback" not in proc.err


@pytest.mark.usefixtures("mlflow_store")
def test_multirun_gives_one_output_per_job(cli: Cli, tmp_path: Path) -> None:
    proc = _cli(
        cli,
        "-m",
        "experiment=smoke",
        "device=cpu",
        "k=0,1",
        "subjects=anatomy",
        "limit=2",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert proc.code == 0, proc.err
    records = sorted((tmp_path / "sweep").glob("*/results.json"))
    assert len(records) == 2
    assert sorted(json.loads(p.read_text())["config"]["k"] for p in records) == [0, 1]
    from mmlu_track.store.sql import SqlStore

    sweeps = {r.sweep for r in SqlStore(f"sqlite:///{tmp_path / 'mmlu_track.db'}").runs()}
    assert sweeps == {str((tmp_path / "sweep").resolve())}


def test_hydra_mode_set_on_the_command_line_is_a_sweep(cli: Cli, tmp_path: Path) -> None:
    """`hydra.mode=MULTIRUN` means `-m`, as Hydra reads it: one output per job."""
    common = ["experiment=smoke", "model=fake", "subjects=anatomy", "limit=2", "tracking=sql_only"]
    sweep = ["k=0,1", "hydra.mode=MULTIRUN", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = _cli(cli, *common, *sweep, cwd=tmp_path)
    assert proc.code == 0, proc.err
    assert len(sorted((tmp_path / "sweep").glob("*/results.json"))) == 2


def test_readme_commands_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "python -m mmlu_track" in readme
    assert "python -m pytest" in readme
