"""commands/runs.py (`python -m mmlu_track.runs`) called with its own argv: the listing and one run
shown from a real SQLite store, a store that is not there neither made nor an error for a listing,
and a run that is not there one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmlu_track.commands import runs
from mmlu_track.store.sql import SqlStore

from ..conftest import synthetic_run


def test_list_and_show_read_the_store_and_an_unknown_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(db)
    run_id = synthetic_run(store, "tiny-m", {"anatomy": [True, True, False], "virology": [False]})
    store.close()

    assert runs.main(["--db", db, "list"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:5] == ["run", "status", "role", "model", "version"]
    assert row.split()[:5] == [run_id[:12], "finished", "-", "tiny-m", "r1"]
    # percent: micro 2/4, macro (2/3 + 0/1) / 2; as given (a circular run's): none
    assert row.split()[-6:-3] == ["50.00", "33.33", "-"]
    # --db after the command, as before it
    assert runs.main(["list", "--db", db]) == 0
    assert capsys.readouterr().out.splitlines() == [header, row]

    assert runs.main(["--db", db, "show", run_id[:8]]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"run {run_id}  status finished  mlflow -\n")
    assert "noise floor of this protocol: not measured" in shown
    assert "anatomy" in shown
    assert "virology" in shown

    assert runs.main(["--db", db, "show", "0000dead"]) == 2
    got = capsys.readouterr()
    assert got.err == f"mmlu_track: error: no run '0000dead' in {db}\n"
    assert got.out == ""


def test_a_missing_store_lists_nothing_and_is_not_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'none.db'}"
    assert runs.main(["--db", db, "list"]) == 0
    assert "no run recorded there yet" in capsys.readouterr().err
    assert runs.main(["--db", db, "show", "abc"]) == 2
    assert capsys.readouterr().err.startswith("mmlu_track: error: no results database at ")
    assert not (tmp_path / "none.db").exists()
    with pytest.raises(SystemExit) as usage:
        runs.main(["--db", db, "lst"])
    assert usage.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("mmlu_track: error: argument command: invalid choice: 'lst'")
