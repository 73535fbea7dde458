"""commands/exits.py and the one error base: every error the package raises on purpose is an
`MmluTrackError` that a command says in one line (exit 2); anything else is a bug, said as one (exit
70, its traceback saved, secrets masked). A broad `except` around the package's own code would turn a
bug into a warning or into "bad input": each library call is wrapped alone, and a non-library
exception injected there exits 70."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from mmlu_track.support.errors import EXIT_BUG, MmluTrackError

from ..conftest import CliResult, synthetic_run
from ..test_layout import GRAPH

Cli = Callable[..., CliResult]

# Not errors of the input: an exit (SystemExit), a launcher's job failure (Hydra's type, so that its
# engine does not retry), and a signal inside the prefix cache that never leaves it.
NOT_ERRORS = {"Unusable", "JobFailed", "Unsupported"}


def test_every_exception_class_of_the_package_derives_from_the_one_base() -> None:
    found = {}
    for name in sorted(GRAPH):
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == name and issubclass(cls, BaseException):
                found[cls_name] = cls
    assert {"ConfigError", "DataError", "ModelError", "StoreError", "ComparisonError", "RecordError"} <= set(
        found
    )
    stray = sorted(
        n for n, cls in found.items() if n not in NOT_ERRORS and not issubclass(cls, MmluTrackError)
    )
    assert stray == []
    assert all(found[n].exit_code == 2 for n in found if n not in NOT_ERRORS)


def _a_bug(*_: object, **__: object) -> None:
    raise KeyError("boom at postgresql://alice:s3cret@db.example/runs")


def _said_as_a_bug(proc: CliResult) -> Path:
    assert proc.code == EXIT_BUG == 70
    (line,) = proc.errors
    assert "internal error (a bug in mmlu_track, not your input): KeyError" in line
    assert "s3cret" not in proc.err
    assert "Traceback" not in proc.err
    (saved,) = re.findall(r"its traceback is in (\S+\.txt)", line)
    text = Path(saved).read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text
    assert "_a_bug" in text
    assert "s3cret" not in text
    return Path(saved)


def test_a_bug_in_the_compare_command_is_said_as_one_with_its_traceback(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mmlu_track.gate.run

    monkeypatch.setattr(mmlu_track.gate.run, "execute", _a_bug)
    proc = cli("compare", "baseline=a", "candidate=b", f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    saved = _said_as_a_bug(proc)
    assert saved.parent == tmp_path / "out"  # beside the command's other files


def test_a_bug_in_an_evaluation_is_said_as_one_and_an_error_of_the_input_is_not(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mmlu_track.pipeline.evaluate

    args = ("model=tiny", "device=cpu", "subjects=anatomy", "limit=1", f"hydra.run.dir={tmp_path / 'out'}")
    with monkeypatch.context() as m:
        m.setattr(mmlu_track.pipeline.evaluate, "run", _a_bug)
        _said_as_a_bug(cli("eval", *args, cwd=tmp_path))

    def refused(*_: object, **__: object) -> None:
        from mmlu_track.eval.data import DataError

        raise DataError("the MMLU folder is empty")

    monkeypatch.setattr(mmlu_track.pipeline.evaluate, "run", refused)
    proc = cli("eval", *args, cwd=tmp_path)
    assert proc.code == 2
    assert proc.errors == ["mmlu_track: error: the MMLU folder is empty"]


@pytest.mark.parametrize("command", ["compare", "runs"])
def test_a_database_url_that_does_not_parse_is_the_users_error_and_repeats_none_of_it(
    cli: Cli, tmp_path: Path, command: str
) -> None:
    """`[::1` makes SQLAlchemy's port parsing raise a ValueError naming part of the URL: it was a
    bug's traceback in compare and runs; the URL (a password in it) is never repeated."""
    url = "postgresql://bob:s3cret@[::1"
    if command == "runs":
        proc = cli("runs", "--db", url, "list", cwd=tmp_path)
    else:
        proc = cli("compare", "baseline=a", "candidate=b", f"tracking.db_url='{url}'", cwd=tmp_path)
    assert proc.code == 2
    (line,) = [x for x in proc.err.splitlines() if "error:" in x]
    assert "the results database URL is malformed (ValueError): write a SQLAlchemy URL" in line
    assert "s3cret" not in proc.err
    assert "bug" not in proc.err


def test_hydras_refusal_of_an_override_is_one_line_in_every_command(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hydra re-raises its own errors under a tracer (coverage, a debugger): print as the command line does.
    monkeypatch.setattr("hydra._internal.utils.is_under_debugger", lambda: False)
    models = "(available options in 'model': fake, hf_hub, openai_api, smollm2_135m, tiny)"
    cases = [  # before: five to eight lines each, ending in a hint about HYDRA_FULL_ERROR
        ("eval", ["foo=1"], "unknown key 'foo' (--help lists every key)"),  # never "use +foo=1"
        ("eval", ["limt=10"], "unknown key 'limt': did you mean limit? (--help lists every key)"),
        ("noise", ["noise.shot_seed=[1]"],
         "unknown key 'noise.shot_seed': did you mean noise.shot_seeds or shot_seed? "
         "(--help lists every key)"),
        ("compare", ["baseline=a", "candidate=b", "margin=0.1"],
         "unknown key 'margin': did you mean gate.margin? (--help lists every key)"),
        ("eval", ["model=gpt5"], f"In 'eval': Could not find 'model/gpt5' {models}"),
        ("compare", ["baseline=a", "candidate=b", "gate=lenient"],
         "In 'compare': Could not find 'gate/lenient' "
         "(available options in 'gate': default, strict, warn_only)"),
        ("eval", ["k=[1"], "cannot parse the override 'k=[1': no viable alternative at input '[1'"),
        ("eval", ["-m", "model=tiny,gpt5"],
         f"sweep job 2 of 2 (model=gpt5): In 'eval': Could not find 'model/gpt5' {models}; no job was run"),
    ]  # fmt: skip
    for which, args, line in cases:
        got = cli(which, *args, cwd=tmp_path)
        assert got.code == 2, (args, got.err)
        assert got.err.strip().splitlines() == [f"mmlu_track: error: {line}"], args
    assert list(tmp_path.iterdir()) == []


def _injected(*_: object, **__: object) -> None:
    raise ZeroDivisionError("injected")


def _a_bug_not_bad_input(proc: CliResult, step: str) -> None:
    """Exit 70 with the bug's one line naming the injected exception, never "cannot be opened"."""
    assert proc.code == 70, (step, proc.err)
    (line,) = proc.errors
    assert "internal error (a bug in mmlu_track, not your input): ZeroDivisionError: injected" in line, step
    assert "cannot be opened" not in proc.err
    assert "warning" not in proc.err


@pytest.mark.parametrize(
    "where",
    ["mmlu_track.store.db.make_engine", "mmlu_track.store.sql.upgrade", "mmlu_track.store.db.upgrade"],
)
def test_a_bug_in_the_database_layer_is_a_bug_not_an_unopenable_database(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """`runs list` with the database layer raising a ZeroDivisionError said "the results database
    ... cannot be opened: injected" and exited 2 (db.py's and sql.py's broad excepts); `db-upgrade`
    the same through runs.py's. A driver's own error stays the one line of exit 2."""
    db = f"sqlite:///{tmp_path / 'store.db'}"
    from mmlu_track.store.sql import SqlStore

    SqlStore(db).close()
    with monkeypatch.context() as m:
        m.setattr(where, _injected)
        if where.endswith("db.upgrade"):  # the explicit command's own call
            _a_bug_not_bad_input(cli("runs", "--db", db, "db-upgrade", cwd=tmp_path), "db-upgrade")
        else:
            _a_bug_not_bad_input(cli("runs", "--db", db, "list", cwd=tmp_path), "list")
    proc = cli("runs", "--db", "postgresql+psycopg://127.0.0.1:1/none", "list", cwd=tmp_path)
    assert proc.code == 2
    assert "bug" not in proc.err


def test_a_bug_reading_a_listed_run_is_not_an_unreadable_record(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runs.py's listing read a run's settings under `except (..., AttributeError)`: a bug raising
    AttributeError there was listed as "?" (an old record), exit 0."""
    from mmlu_track.store.sql import SqlStore

    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(db)
    synthetic_run(store, "m", {"anatomy": [True, False]})
    store.close()

    def broken(*_: object) -> None:
        raise AttributeError("injected")

    assert cli("runs", "--db", db, "list", cwd=tmp_path).code == 0
    monkeypatch.setattr("mmlu_track.commands.runs._section", broken)
    proc = cli("runs", "--db", db, "list", cwd=tmp_path)
    assert proc.code == 70, proc.err
    assert "AttributeError: injected" in proc.errors[0]


@pytest.mark.usefixtures("mlflow_store")
def test_a_bug_while_logging_to_mlflow_is_a_bug_not_a_not_logged_warning(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LiveRun's calls caught every exception as "MLflow failed: not logged", the package's own code
    inside them included (the run's metrics, its description)."""
    import mmlu_track.store.mlflow.live

    monkeypatch.setattr(mmlu_track.store.mlflow.live, "metrics", _injected)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ("model=tiny", "device=cpu", "subjects=anatomy", "limit=1", "k=0", "tracking.mlflow=true",
            f"tracking.mlflow_uri={uri}", f"hydra.run.dir={tmp_path / 'out'}")  # fmt: skip
    _a_bug_not_bad_input(cli("eval", *args, cwd=tmp_path), "eval")


@pytest.mark.parametrize("where", ["comparison.shown", "registry.quiet"])
@pytest.mark.usefixtures("mlflow_store")
def test_a_bug_logging_a_comparison_or_reading_the_registry_is_a_bug(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """mlflow_comparison.py caught every exception as "logging to MLflow failed" (a warning, exit 0),
    registry.py every one as "not promoted" or "no model version"."""
    import mmlu_track.store.mlflow
    from mmlu_track.store.sql import SqlStore

    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(db)
    flags = {"anatomy": [True, False] * 20}
    base, cand = synthetic_run(store, "m", flags), synthetic_run(store, "m", flags)
    store.close()
    module, name = where.split(".")
    monkeypatch.setattr(getattr(mmlu_track.store.mlflow, module), name, _injected)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    baseline = base if module == "comparison" else "models:/m@champion"
    proc = cli("compare", f"baseline={baseline}", f"candidate={cand}", f"tracking.db_url={db}",
               f"tracking.mlflow_uri={uri}", "tracking.mlflow=true", "gate=warn_only",
               f"hydra.run.dir={tmp_path / 'report'}", cwd=tmp_path)  # fmt: skip
    _a_bug_not_bad_input(proc, where)


def test_a_registry_alias_on_a_dead_tracking_server_is_one_line_within_seconds(
    cli: Cli, tmp_path: Path
) -> None:
    """`models:/NAME@ALIAS` against a server that does not answer hung for minutes (no reachability
    check, MLflow's own retries): one line, exit 2, within about 10 s."""
    import socket
    import time

    from mmlu_track.store.sql import SqlStore

    db = f"sqlite:///{tmp_path / 's.db'}"
    SqlStore(db).close()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    began = time.monotonic()
    proc = cli("compare", "baseline=models:/m@champion", "candidate=abc", f"tracking.db_url={db}",
               f"tracking.mlflow_uri=http://bob:s3cret@127.0.0.1:{port}", f"hydra.run.dir={tmp_path / 'r'}",
               cwd=tmp_path)  # fmt: skip
    assert time.monotonic() - began < 10
    assert proc.code == 2, proc.err
    (line,) = proc.errors
    said = f"cannot resolve models:/m@champion: MLflow server http://bob:***@127.0.0.1:{port} is unreachable"
    assert said in line
    assert "s3cret" not in proc.err


def test_errors_as_exit_codes_says_an_input_error_in_one_masked_line_and_a_bug_as_a_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`commands/exits.py` itself: an `MmluTrackError` exits 2 with its lines joined into one, a
    password masked; any other exception exits 70 naming its saved traceback (masked too);
    Ctrl-C passes through untouched."""
    import tempfile

    from mmlu_track.commands.exits import Unusable, errors_as_exit_codes

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where `bug` saves outside a Hydra job
    url = "postgresql://alice:s3cret-9f@db.example/runs"
    with pytest.raises(Unusable) as said, errors_as_exit_codes():
        raise MmluTrackError(f"cannot open\n  {url}")
    assert said.value.code == 2
    assert said.value.line == "cannot open postgresql://alice:***@db.example/runs"
    assert capsys.readouterr().err == f"mmlu_track: error: {said.value.line}\n"

    with pytest.raises(Unusable) as bug, errors_as_exit_codes():
        raise ValueError(f"no such key in {url}")
    assert bug.value.code == EXIT_BUG
    assert bug.value.line.startswith(
        "internal error (a bug in mmlu_track, not your input): ValueError: no such key in "
        "postgresql://alice:***@db.example/runs; its traceback is in "
    )
    (saved,) = tmp_path.glob("mmlu_track-bug-*.txt")
    assert str(saved) in bug.value.line
    traceback = saved.read_text()
    assert "ValueError" in traceback
    assert "s3cret-9f" not in traceback + capsys.readouterr().err

    with pytest.raises(KeyboardInterrupt), errors_as_exit_codes():
        raise KeyboardInterrupt


def test_an_output_folder_that_cannot_be_made_is_refused_up_front_and_a_good_one_left_unmade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmlu_track.commands.exits import Unusable, check_writable_cwd

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(Unusable) as refused:
        check_writable_cwd([f"hydra.run.dir={blocker / 'out'}"])
    assert refused.value.code == 2
    assert refused.value.line.startswith(f"hydra.run.dir={blocker / 'out'} cannot be created: ")
    assert refused.value.line.endswith("; choose a writable folder")
    capsys.readouterr()
    check_writable_cwd([f"hydra.sweep.dir={tmp_path / 'new' / 'deeper'}", "k=0"])
    assert not (tmp_path / "new").exists()  # tried, then taken away again: Hydra makes it
