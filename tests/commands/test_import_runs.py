"""commands/import_runs.py: `python -m mmlu_track.runs import PATH` as a user runs it, on real
lm-eval 0.4.13 output (`tests/data/lm_eval/`): its lines, the run it stores once (MLflow too), its
`--help`, and bad input as one line, exit 2, nothing recorded."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from mmlu_track.commands import import_runs

from ..conftest import LM_EVAL_DATA, CliResult, stored_runs
from ..conftest import import_lm_eval as _import

DATA = LM_EVAL_DATA
Cli = Callable[..., CliResult]


def _id(got: CliResult) -> str:
    return got.out.split("imported run ")[1].split()[0]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_help_says_what_it_stores_and_its_exit_codes(cli: Cli, tmp_path: Path) -> None:
    got = cli("runs", "import", "--help", cwd=tmp_path)
    text = " ".join(got.out.split())
    assert got.code == 0
    assert import_runs.HELP in text
    assert "70 a bug in mmlu_track" in text


@pytest.mark.usefixtures("mlflow_store")
def test_the_same_files_import_once_and_the_run_is_listed_as_any(cli: Cli, tmp_path: Path, db: str) -> None:
    first = cli("runs", "--db", db, "import", str(DATA / "zero_shot"), "--mlflow-uri",
                f"sqlite:///{tmp_path / 'mlflow.db'}", cwd=tmp_path)  # fmt: skip
    assert first.code == 0, first.err
    assert ", MLflow run " in first.out
    from mlflow.tracking import MlflowClient

    logged = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(
        first.out.split(", MLflow run ")[1].split(")")[0]
    )
    assert logged.data.tags["mmlu_track.imported_from"] == "lm-eval"
    assert "the first 4 per subject (lm-eval's --limit)" in logged.data.tags["mlflow.note.content"]
    assert (logged.data.params["imported.prompts"], logged.data.params["imported.versions.lm_eval"]) == (
        "harness",
        "0.4.13",
    )
    run_id = _id(first)
    again = _import(cli, tmp_path, db, str(next((DATA / "zero_shot").rglob("results_*.json"))))
    assert again.code == 0
    assert f"imported before as run {run_id} (smol_hf, 8 questions): nothing added" in again.out
    (run,) = stored_runs(db)
    record = run.record
    assert record is not None
    imported = record.start.imported
    assert imported is not None
    assert (imported.prompts, imported.limit, imported.versions["lm_eval"]) == ("harness", 4.0, "0.4.13")
    assert (record.start.model.source, record.start.config.k) == ("lm-eval", 0)
    shown = cli("runs", "--db", db, "show", run_id[:8], cwd=tmp_path)
    assert "imported from lm-eval on 2026-12-06 (harness prompts, --limit 4)" in shown.out, shown.out
    assert "k=0, limit first 4 per subject (lm-eval's --limit)" in shown.out


@pytest.mark.parametrize("breaks", ["no_samples", "two_models"])
def test_bad_input_is_one_line_exit_2_and_nothing_recorded(
    cli: Cli, tmp_path: Path, db: str, breaks: str
) -> None:
    out = tmp_path / "lm_eval_out"
    for name in ("zero_shot", "five_shot"):
        shutil.copytree(next((DATA / name).iterdir()), out / name)
    if breaks == "no_samples":
        for p in (out / "five_shot").glob("samples_*"):
            p.unlink()
        said = "run lm-eval with --log_samples"
    else:
        results = next((out / "five_shot").glob("results_*.json"))
        results.write_text(
            results.read_text().replace('"model_name": "/tmp/smol_hf"', '"model_name": "org/other"')
        )
        said = "holds runs of 2 models (/tmp/smol_hf, org/other): --name names one model"
    got = _import(cli, tmp_path, db, str(out), *(["--name", "x"] if breaks == "two_models" else []))
    assert got.code == 2
    (line,) = got.errors
    assert said in line
    assert not (tmp_path / "store.db").exists()  # nothing recorded, no store made


def test_the_same_files_under_another_name_are_the_run_they_made(cli: Cli, tmp_path: Path, db: str) -> None:
    first = _id(_import(cli, tmp_path, db, str(DATA / "zero_shot")))
    again = _import(cli, tmp_path, db, str(DATA / "zero_shot"), "--name", "renamed")
    assert f"imported before as run {first} (smol_hf, 8 questions): nothing added" in again.out
    assert len(stored_runs(db)) == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--db", "sqlite://"], "an in-memory database keeps nothing"),
        (["--name", "  "], "a model name is one line of text without surrounding spaces"),
        (["--name", "a\nb"], "a model name is one line of text without surrounding spaces"),
    ],
)
def test_a_store_that_keeps_nothing_or_a_blank_name_is_one_line(
    cli: Cli, tmp_path: Path, args: list[str], said: str
) -> None:
    db = args[1] if args[0] == "--db" else f"sqlite:///{tmp_path / 'store.db'}"
    rest = args[2:] if args[0] == "--db" else args
    got = cli("runs", "--db", db, "import", str(DATA / "zero_shot"), *rest, "--no-mlflow", cwd=tmp_path)
    assert got.code == 2
    (line,) = got.errors
    assert said in line
    assert not (tmp_path / "store.db").exists()


def test_a_password_with_a_space_never_leaves_the_process(cli: Cli, tmp_path: Path) -> None:
    got = cli("runs", "--db", "postgresql://user:sec ret@127.0.0.1:1/db", "list", cwd=tmp_path)
    assert got.code == 2
    assert "sec ret" not in got.out + got.err
    assert "ret@" not in got.out + got.err
