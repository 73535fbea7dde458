"""The catalogue of bad inputs and faults, each through the real command line: one line on stderr,
no traceback, the documented exit code, and nothing stored lost or changed.

In-process (the `cli` fixture) unless the process itself is the point: signals, several processes
at once, a lock taken by another process while a run is under way."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mmlu_track.store.orm import QuestionRow, Run
from mmlu_track.store.sql import SqlStore

from . import processes
from .conftest import CliResult, synthetic_run

GOOD = {"question": "Fine?", "choices": ["a", "b", "c", "d"], "answer": 1}


Cli = Callable[..., CliResult]


def _cli(cli: Cli, tmp_path: Path, *args: str, db: Path, env: dict[str, str] | None = None) -> CliResult:
    """`python -m mmlu_track tracking.db_url=sqlite:///DB ARGS` run from `tmp_path`, in-process."""
    return cli("eval", f"tracking.db_url=sqlite:///{db}", *args, cwd=tmp_path, env=env)


def _snapshot(db: Path) -> list[tuple[str, str, int]]:
    store = SqlStore(f"sqlite:///{db}")
    with Session(store.engine) as s:
        runs = [(r.id, r.status) for r in s.scalars(select(Run).order_by(Run.id))]
        counts = dict(s.execute(select(QuestionRow.run_id, func.count()).group_by(QuestionRow.run_id)).all())
    store.close()
    return [(rid, status, counts.get(rid, 0)) for rid, status in runs]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding one finished run, copied into every case: it must come out unchanged."""
    db = tmp_path_factory.mktemp("stored") / "store.db"
    synthetic_run(SqlStore(f"sqlite:///{db}"), "m-existing", {"anatomy": [True, False, True]})
    return db


def _local(tmp_path: Path, test_file: str, content: bytes) -> list[str]:
    """A local data folder: good anatomy dev rows, and `content` as the test split's file."""
    root = tmp_path / "data"
    (root / "dev").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "dev" / "anatomy.jsonl").write_text("\n".join(json.dumps(GOOD) for _ in range(5)))
    (root / "test" / test_file).write_bytes(content)
    return ["data=local", f"data.path={root}", "subjects=anatomy"]


def _csv(*rows: str) -> bytes:
    return "\n".join(rows).encode()


def _jsonl(*rows: dict[str, object]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def _garbage_model(tmp_path: Path) -> list[str]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 100}))
    (model / "model.safetensors").write_bytes(b"garbage" * 100)
    return ["experiment=smoke", "model=hf_hub", f"model.name_or_path={model}"]


Setup = Callable[[Path], list[str]]
CASES: list[tuple[str, Setup, int, str]] = [
    (
        "prompt longer than the context even with 0 shots",
        lambda _: ["experiment=smoke", "max_length=16"],
        2,
        "6 of 6 prompts do not fit the model's context (16 tokens) even with 0 shots",
    ),
    (
        "row of a per-split file with a differently cased subject",
        lambda p: _local(
            p, "../test.jsonl", _jsonl({**GOOD, "subject": "anatomy"}, {**GOOD, "subject": "Anatomy"})
        ),
        2,
        "row 2 has unknown subject 'Anatomy' (did you mean anatomy?)",
    ),
    (
        "CSV row with an empty choice",
        lambda p: _local(p, "anatomy_test.csv", _csv("Q?,a,,c,d,A")),
        2,
        "choice B is empty",
    ),
    (
        "non-UTF-8 byte",
        lambda p: _local(p, "anatomy_test.csv", b"Q\xff?,a,b,c,d,A"),
        2,
        "not UTF-8 text (byte 0xff",
    ),
    (
        "CSV field over 131,072 characters",
        lambda p: _local(p, "anatomy_test.csv", _csv("Q?,a,b,c,d,A", '"' + "x" * 140_000 + '",a,b,c,d,A')),
        2,
        "line 2: field larger than field limit",
    ),
    (
        "JSONL line that is a list",
        lambda p: _local(p, "anatomy.jsonl", b'["Q?", "a"]'),
        2,
        "line 1 is a JSON list",
    ),
    (
        "tracking=server without its URL",
        lambda _: ["experiment=smoke", "tracking=server"],
        2,
        "Missing mandatory value: tracking.mlflow_uri",
    ),
    (
        "a sweep with one bad value",
        lambda _: ["-m", "experiment=smoke", "k=0,9,2", "tracking=sql_only"],
        2,
        "sweep job 2 of 3 (k=9): k=9 is impossible",
    ),
    (
        "a converted-model cache that cannot be written",
        lambda _: ["experiment=smoke", "cache_dir=/proc/no-such-cache"],
        2,
        "cannot write the converted-model cache in /proc/no-such-cache/gguf/",
    ),
    (
        "a Parquet file that is not one",
        lambda p: _local(p, "anatomy.parquet", b"\x00not parquet" * 20),
        2,
        "anatomy.parquet is not a readable Parquet file",
    ),
    (
        "data.path naming a file, not the MMLU folder",
        lambda p: ["data=local", f"data.path={p / 'store.db'}", "subjects=anatomy", "experiment=smoke"],
        2,
        "store.db is a file: give the MMLU folder that holds dev/ and test/",
    ),
    (
        "a tiny model whose heads cannot split its width",
        lambda _: ["experiment=smoke", "model.tiny_hidden_size=3"],
        2,
        "model.tiny_hidden_size=3 must be a positive multiple of 8",
    ),
    (
        "a tiny model without layers",
        lambda _: ["experiment=smoke", "model.tiny_num_layers=0"],
        2,
        "model.tiny_num_layers=0 must be >= 1",
    ),
    (
        "a fake model that would take forever",
        lambda _: ["experiment=smoke", "model=fake", "model.fake_seconds_per_question=inf"],
        2,
        "model.fake_seconds_per_question=inf must be a finite number of seconds, 0 or more",
    ),
    (
        "an in-memory results database",
        lambda _: ["experiment=smoke", "tracking.db_url=sqlite://"],
        2,
        "tracking.db_url=sqlite:// is an in-memory database",
    ),
    (
        "a served model's URL with an unclosed IPv6 bracket",
        lambda _: [
            "model=openai_api",
            "model.served_name=m",
            "model.revision=r",
            "k=0",
            "model.base_url='http://u:s3cret@[::1/v1'",
        ],
        2,
        "model.base_url does not parse as a URL (Invalid IPv6 URL)",
    ),
    ("unknown config option", lambda _: ["model=gpt5"], 2, "Could not find 'model/gpt5'"),
    ("weights that are not a model", _garbage_model, 2, "could not load model"),
    ("unknown key", lambda _: ["experiment=smoke", "margin=0.02"], 2, "did you mean gate.margin?"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_catalogue(
    tmp_path: Path, stored: Path, case: tuple[str, Setup, int, str], cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, setup, code, message = case
    # Hydra re-raises its own errors under a tracer (a debugger, coverage) instead of printing them:
    # in-process, make it print as the command line does.
    monkeypatch.setattr("hydra._internal.utils.is_under_debugger", lambda: False)
    db = tmp_path / "store.db"
    shutil.copy(stored, db)
    before = _snapshot(db)
    args = setup(tmp_path)
    if "tracking=server" not in args and "tracking=sql_only" not in args:
        args.append("tracking=sql_only")
    got = _cli(cli, tmp_path, *args, f"hydra.run.dir={tmp_path / 'out'}", db=db)
    assert got.code == code, got.err
    lines = got.errors
    assert "Traceback" not in got.err
    if message.startswith(("Could not", "Key ")):  # Hydra's own message, with its hint lines
        assert message in got.err
    else:
        assert len(lines) == 1, got.err
        assert message in lines[0]
    assert _snapshot(db) == before


def test_truncation_allowed_is_said_and_recorded(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "store.db"
    got = _cli(cli, tmp_path, "experiment=smoke", "max_length=16", "allow_truncation=true",
               "tracking=sql_only", f"hydra.run.dir={tmp_path / 'out'}", db=db)  # fmt: skip
    assert got.code == 0, got.err
    assert "warning: 6 prompts were truncated to their last tokens" in got.out
    assert json.loads((tmp_path / "out" / "results.json").read_text())["prompt"]["truncated"] == 6


def _slow_run_args(tmp_path: Path, db: Path, pace: float = 0.02) -> list[str]:
    """A run of the fake model long enough to interrupt (four subjects at 20 ms a question: ~11 s);
    `pace=0`: the same run at full speed (the pace is outside a run's identity), to resume it."""
    subjects = "subjects=[abstract_algebra,anatomy,astronomy,virology]"
    out = f"hydra.run.dir={tmp_path / 'out'}"
    return [f"tracking.db_url=sqlite:///{db}", "model=fake", f"model.fake_seconds_per_question={pace}",
            "tracking=sql_only", "k=0", "batch_size=1", subjects, out]  # fmt: skip


def _slow_run(tmp_path: Path, db: Path) -> list[str]:
    """`_slow_run_args` as a command line of its own (for a process to signal, or several at once)."""
    return ["-m", "mmlu_track", *_slow_run_args(tmp_path, db)]


def test_ctrl_c_says_how_to_resume_and_keeps_what_was_committed(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "store.db"
    cmd = _slow_run(tmp_path, db)
    proc = processes.Popen(cmd, cwd=tmp_path)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        if db.exists() and any(n for _, _, n in _snapshot(db)):
            break  # a subject is committed: interrupt mid-run
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "mmlu_track: interrupted; run the same command to resume"
    assert "Traceback" not in err
    ((run_id, status, kept),) = _snapshot(db)
    assert status == "failed"
    assert kept > 0
    again = cli("eval", *_slow_run_args(tmp_path, db, pace=0), cwd=tmp_path)  # the same command, run again
    assert again.code == 0, again.err
    assert f"resuming run {run_id}" in again.out
    assert "resumed from the store" in again.out


def test_a_database_locked_too_long_is_one_line(tmp_path: Path, stored: Path, cli: Cli) -> None:
    import sqlite3

    db = tmp_path / "store.db"
    shutil.copy(stored, db)
    before = _snapshot(db)
    holder = sqlite3.connect(db, isolation_level=None)
    # Another writer holding the write lock: SQLite locks per connection, within a process too.
    holder.execute("BEGIN IMMEDIATE")
    try:
        out = f"hydra.run.dir={tmp_path / 'out'}"
        got = _cli(cli, tmp_path, "experiment=smoke", "tracking=sql_only", out, db=db,
                   env={"MMLU_TRACK_SQLITE_BUSY_TIMEOUT": "1"})  # fmt: skip
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert got.code == 2, got.err
    (line,) = got.errors
    assert "stayed locked by another process (waited 1 s)" in line
    assert "Traceback" not in got.err
    assert _snapshot(db) == before


def test_listing_runs_where_there_is_no_store_creates_none(tmp_path: Path) -> None:
    from mmlu_track.commands.runs import main as runs_main

    missing = tmp_path / "none.db"
    # A listing of nothing is an empty answer; a run asked for by id is an error (issue 55: `runs
    # noise` exited 2 where `runs list` exited 0).
    for command in (["list"], ["noise"], ["sync"]):
        assert runs_main(["--db", f"sqlite:///{missing}", *command]) == 0, command
    assert runs_main(["--db", f"sqlite:///{missing}", "show", "abc"]) == 2
    assert not missing.exists()


def test_every_runs_error_is_one_line_starting_as_every_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mmlu_track: error:` as docs/troubleshooting.md says (it was `mmlu_track.runs: …`), argparse's
    usage errors included (they printed the usage, then `python -m mmlu_track.runs: error: …`)."""
    from mmlu_track.commands.runs import main as runs_main

    db = f"sqlite:///{tmp_path / 'store.db'}"
    SqlStore(db).close()
    for argv in (
        ["--db", db, "show", "abc"],
        ["--db", f"sqlite:///{tmp_path / 'none.db'}", "show", "abc"],
        ["--db", "not a url", "list"],
        ["--db", db, "lsit"],
        ["--db", db, "list", "--limit", "many"],
        [],
    ):
        try:
            code = runs_main(argv)
        except SystemExit as exit_:
            code = int(str(exit_.code))
        err = capsys.readouterr().err
        assert code == 2, argv
        assert err.startswith("mmlu_track: error: "), (argv, err)
        assert err.count("\n") == 1, (argv, err)


def test_runs_listed_into_a_reader_that_stops_early_end_quietly(tmp_path: Path) -> None:
    """`runs list | head`: the reader is gone before the listing is written (the process is the
    point: a real closed pipe). Before: a BrokenPipeError traceback and exit 120."""
    db = f"sqlite:///{tmp_path / 'store.db'}"
    synthetic_run(SqlStore(db), "m-listed", {"anatomy": [True, False]})
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmlu_track.runs", "--db", db, "list"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.close()  # before the child has imported anything, let alone printed
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert b"BrokenPipe" not in err
    assert b"Traceback" not in err


def test_a_damaged_converted_model_names_the_folder_to_delete(
    tmp_path: Path, cli: Cli, cache_dir: Path
) -> None:
    from mmlu_track.eval import models
    from mmlu_track.settings.config import ModelConfig

    package, filename = models.PACKAGED_SMOLLM2
    gguf_cfg = ModelConfig(name="SmolLM2", source="gguf", package=package, gguf_file=filename)
    key_dir, gguf, _ = models.gguf_cache(gguf_cfg, tmp_path / "cache")
    shared, _, _ = models.gguf_cache(gguf_cfg, cache_dir)
    shutil.copytree(models._converted_tokenizer(shared, gguf), key_dir / "tokenizer")  # a good tokenizer
    (key_dir / "model").mkdir()
    (key_dir / "model" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (key_dir / "model" / "model.safetensors").write_bytes(b"\0" * 100)  # a copy cut short
    args = (f"cache_dir={tmp_path / 'cache'}", "subjects=anatomy", "limit=1", "tracking=sql_only")
    got = _cli(cli, tmp_path, *args, f"hydra.run.dir={tmp_path / 'out'}", db=tmp_path / "store.db")
    assert got.code == 2, got.err
    (line,) = got.errors
    assert f"the converted copy of {filename} in {key_dir} cannot be read" in line
    assert "delete that folder and run again" in line
    assert "Traceback" not in got.err


def test_conversions_started_together_convert_once(tmp_path: Path) -> None:
    """Two converters of one copy at once (flock conflicts between open files, threads included):
    the second waits and takes the first's copy instead of converting again."""
    import threading

    from mmlu_track.eval import models

    calls: list[int] = []

    def build(folder: Path) -> None:
        calls.append(1)
        time.sleep(0.3)  # long enough that the second converter arrives while this one works
        (folder / "done").write_text("ok")

    out = tmp_path / "key" / "model"
    got: list[Path] = []
    workers = [threading.Thread(target=lambda: got.append(models._convert_once(out, "done", build)))
               for _ in range(2)]  # fmt: skip
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert calls == [1]
    assert got == [out, out]
    assert (out / "done").read_text() == "ok"


def test_a_conversion_parses_its_gguf_once_and_leaves_gguf_as_it_found_it(tmp_path: Path) -> None:
    """transformers reads a GGUF's metadata three times per conversion (10 s each for SmolLM2):
    inside the block every read of one file gets one parsed reader, nested blocks included, and the
    library's own functions are back afterwards. (The default model's converted files were checked
    byte-identical with and without it, and the slow tests score them against lm-eval.)"""
    import gguf
    from transformers import modeling_gguf_pytorch_utils as tf_gguf

    from mmlu_track.eval import models

    path = tmp_path / "t.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    before = (gguf.GGUFReader, gguf.get_tensor_name_map, tf_gguf.load_gguf_checkpoint)
    with models._gguf_parsed_once():
        first = gguf.GGUFReader(path)
        with models._gguf_parsed_once():
            assert gguf.GGUFReader(str(path)) is first
        assert gguf.GGUFReader(path) is first
        assert int(first.fields["llama.block_count"].parts[-1][0]) == 2
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
        assert tf_gguf.load_gguf_checkpoint(str(path)) == tf_gguf.load_gguf_checkpoint(str(path))
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, tf_gguf.load_gguf_checkpoint) == before
    assert gguf.GGUFReader(path) is not first


def test_truncated_runs_are_named_in_the_comparison(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "store.db"
    ids = []
    for batch in (1, 4):  # the same questions, scored twice
        args = ("experiment=smoke", "max_length=16", "allow_truncation=true", f"batch_size={batch}",
                "tracking.rerun=true")  # fmt: skip
        got = _cli(cli, tmp_path, *args, "tracking=sql_only", f"hydra.run.dir={tmp_path / str(batch)}", db=db)
        assert got.code == 0, got.err
        ids.append(json.loads((tmp_path / str(batch) / "results.json").read_text())["run_id"])
    report = f"hydra.run.dir={tmp_path / 'cmp'}"
    got = cli("compare", f"baseline={ids[0]}", f"candidate={ids[1]}", f"tracking.db_url=sqlite:///{db}",
              "tracking.mlflow=false", report, cwd=tmp_path)  # fmt: skip
    assert "the baseline run scored 6 truncated prompts" in got.out, got.err
    assert "the candidate run scored 6 truncated prompts" in (tmp_path / "cmp" / "report.md").read_text()


def test_a_read_only_database_is_one_line_and_unchanged(tmp_path: Path, stored: Path, cli: Cli) -> None:
    # SQLite's read-only mode stands in for a write-protected file (root ignores file modes).
    db = tmp_path / "store.db"
    shutil.copy(stored, db)
    before = _snapshot(db)
    url = f"sqlite:///file:{db}?mode=ro&uri=true"
    out = f"hydra.run.dir={tmp_path / 'out'}"
    got = cli("eval", f"tracking.db_url='{url}'", "experiment=smoke", "tracking=sql_only", out, cwd=tmp_path)
    assert got.code == 2, got.err
    (line,) = got.errors
    assert "is read-only (attempt to write a readonly database)" in line
    assert _snapshot(db) == before


def test_a_read_only_working_directory_is_one_line(tmp_path: Path, cli: Cli) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)]
    mounted = subprocess.run(mount, capture_output=True, check=False)
    assert mounted.returncode == 0, mounted.stderr  # root in this project's machines (and CI) may mount
    expected = (
        f"mmlu_track: error: the working directory {ro} is not writable (outputs/ and the default "
        "results database go there): run from a writable folder, or set hydra.run.dir=DIR and "
        "tracking.db_url=URL"
    )
    try:
        for which in ("eval", "compare"):  # python -m mmlu_track, python -m mmlu_track.compare
            got = cli(which, "experiment=smoke", cwd=ro)
            assert got.code == 2, got.err
            assert got.err.strip().splitlines() == [expected]
            # An explicit output folder there is refused the same way (Hydra's own mkdir would trace).
            got = cli(which, "experiment=smoke", f"hydra.run.dir={ro / 'out' / 'deep'}", cwd=tmp_path)
            assert got.code == 2, got.err
            assert got.err.strip().splitlines() == [
                f"mmlu_track: error: hydra.run.dir={ro / 'out' / 'deep'} cannot be created: {ro} is not "
                "writable; choose a writable folder"
            ]
    finally:
        subprocess.run(["umount", str(ro)], check=False)


def test_a_lock_held_mid_run_keeps_what_was_committed_and_says_resume(tmp_path: Path, cli: Cli) -> None:
    import sqlite3

    db = tmp_path / "store.db"
    cmd = _slow_run(tmp_path, db)
    env = {**os.environ, "MMLU_TRACK_SQLITE_BUSY_TIMEOUT": "1"}
    proc = processes.Popen(cmd, cwd=tmp_path, env=env)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if db.exists() and any(n for _, _, n in _snapshot(db)):
            break  # a subject is committed: now another process takes the write lock
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        _, err = proc.communicate(timeout=240)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == 2, err
    (line,) = [x for x in err.splitlines() if x.startswith("mmlu_track: error")]
    assert "stayed locked by another process (waited 1 s)" in line
    assert line.endswith("the questions committed so far are kept: run the same command to resume")
    ((run_id, _, kept),) = _snapshot(db)
    assert kept > 0
    again = cli("eval", *_slow_run_args(tmp_path, db, pace=0), cwd=tmp_path)  # the same command, run again
    assert again.code == 0, again.err
    assert f"resuming run {run_id}" in again.out


@pytest.mark.slow  # three interpreters, each creating MLflow's store
def test_parallel_runs_in_a_fresh_folder_never_collide(tmp_path: Path) -> None:
    """Three runs at once with the default tracking, two of them told to write into one folder:
    own folders (`run-<id>/` below a taken one), own records, all in MLflow."""
    from mlflow.tracking import MlflowClient

    env = {**os.environ, "HYDRA_FULL_ERROR": ""}
    env.pop("MLFLOW_TRACKING_URI", None)
    folder = {2: [f"hydra.run.dir={tmp_path / 'same'}"], 3: [f"hydra.run.dir={tmp_path / 'same'}"]}
    procs = [
        processes.Popen(
            ["-m", "mmlu_track", "experiment=smoke", "model=fake", f"seed={seed}", *folder.get(seed, [])],
            cwd=tmp_path,
            env=env,
        )
        for seed in (1, 2, 3)
    ]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errs
    runs = SqlStore(f"sqlite:///{tmp_path / 'mmlu_track.db'}").runs()
    assert len({r.output_dir for r in runs}) == 3
    for r in runs:
        assert json.loads((Path(str(r.output_dir)) / "results.json").read_text())["run_id"] == r.id
        assert r.mlflow_run_id
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert {client.get_run(str(r.mlflow_run_id)).info.status for r in runs} == {"FINISHED"}


@pytest.mark.slow  # three interpreters
def test_the_same_run_started_three_times_at_once_runs_once(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    cmd = _slow_run(tmp_path, db)
    procs = [processes.Popen(cmd, cwd=tmp_path) for _ in range(3)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2, 2], errs
    refused = [e for p, e in zip(procs, errs, strict=True) if p.returncode == 2]
    assert all("with these settings is being evaluated by process" in e for e in refused)
    ((_, status, n),) = _snapshot(db)
    assert status == "finished"
    assert n > 0


def test_an_unhealthy_mlflow_server_costs_seconds_and_names_it_in_the_hint(tmp_path: Path, cli: Cli) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path.startswith("/health") else 503)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    start = time.monotonic()
    try:
        got = _cli(cli, tmp_path, "experiment=smoke", "tracking=server", f"tracking.mlflow_uri={uri}",
                   f"hydra.run.dir={tmp_path / 'out'}", db=tmp_path / "store.db")  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert got.code == 0, got.err
    assert time.monotonic() - start < 120
    assert f"sync --mlflow-uri '{uri}'" in got.err
    assert not (tmp_path / "mlflow.db").exists()


def test_runs_command_bad_urls_and_settings_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mmlu_track.commands.runs import main as runs_main

    assert runs_main(["--db", "not a url", "list"]) == 2
    assert "Could not parse SQLAlchemy URL" in capsys.readouterr().err
    assert runs_main(["--db", "postgresql+psycopg://u@127.0.0.1:9/x", "db-upgrade"]) == 2  # nothing listens
    assert "cannot be upgraded: connection failed" in capsys.readouterr().err
    monkeypatch.setenv("MMLU_TRACK_SQLITE_BUSY_TIMEOUT", "soon")
    db = tmp_path / "store.db"
    db.write_bytes(b"")
    assert runs_main(["--db", f"sqlite:///{db}", "list"]) == 2
    assert (
        "MMLU_TRACK_SQLITE_BUSY_TIMEOUT='soon' must be a number of seconds above 0" in capsys.readouterr().err
    )
