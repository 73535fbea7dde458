"""The SQL store on real SQLite: migrations, per-subject commits, resume, concurrent writers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import func, inspect, select
from sqlalchemy.orm import Session

from mmlu_track.pipeline.evaluate import QUIET, run
from mmlu_track.store.db import StoreError, make_engine
from mmlu_track.store.liveness import DEAD_AFTER, RunInProgress
from mmlu_track.store.orm import Base, QuestionRow, Run, RunShard, SubjectScore
from mmlu_track.store.sql import SqlStore
from mmlu_track.support.resources import MIGRATIONS_DIR

from .. import processes
from ..conftest import ROOT, synthetic_start, tiny_run_cfg


def _alembic_config():  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def test_migrate_to_head_matches_the_orm_and_downgrades(sqlite_url: str) -> None:
    from alembic import command

    store = SqlStore(sqlite_url)  # upgrades the empty database at start
    with store.engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) >= {"runs", "subject_scores", "question_results"}
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == [], f"ORM and migrations differ: {diff}"
    cfg = _alembic_config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    with store.engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) <= {"alembic_version"}
    SqlStore(sqlite_url)  # and back up again


def test_alembic_cli_upgrade_check(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    ini = str(MIGRATIONS_DIR / "alembic.ini")
    for args in (["upgrade", "head"], ["check"]):
        proc = subprocess.run(
            [sys.executable, "-m", "alembic", "-c", ini, "-x", f"url={url}", *args],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr


def test_a_newer_schema_is_refused(sqlite_url: str) -> None:
    store = SqlStore(sqlite_url)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_future'")
    with pytest.raises(StoreError, match="newer than this mmlu_track"):
        SqlStore(sqlite_url)


def test_unusable_url_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="cannot be opened"):
        SqlStore("sqlite:////proc/x.db")  # a folder that exists, where no file can be made


def test_a_results_database_in_a_missing_folder_is_refused_and_no_folder_made(tmp_path: Path) -> None:
    """A typo in a path made a new tree and put the results there (issue 52): the user names the
    file, never a folder for it."""
    missing = tmp_path / "no" / "such"
    with pytest.raises(
        StoreError, match=f"the results database's folder {missing} does not exist: create it"
    ):
        SqlStore(f"sqlite:///{missing / 'x.db'}")
    assert not (tmp_path / "no").exists()


def test_sqlite_is_opened_for_concurrent_writers(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60000


def test_a_run_has_one_row_per_question(sqlite_url: str, tmp_path: Path) -> None:
    out = run(tiny_run_cfg(sqlite_url), tmp_path / "out", display=QUIET)
    store = SqlStore(sqlite_url)
    stored = store.get(out.run_id)
    assert stored is not None
    assert stored.status == "finished"
    assert stored.acc_micro == out.scores.micro.acc
    assert store.question_results(out.run_id) == sorted(out.results, key=lambda r: (r.subject, r.index))
    with Session(store.engine) as s:
        assert (
            s.scalar(select(func.count()).select_from(SubjectScore).where(SubjectScore.run_id == out.run_id))
            == 2
        )
    # A finished run is never resumed: the same config again takes it as it is; rerun is a new run.
    assert run(tiny_run_cfg(sqlite_url), tmp_path / "same", display=QUIET).run_id == out.run_id
    again = run(tiny_run_cfg(sqlite_url, "tracking.rerun=true"), tmp_path / "again", display=QUIET)
    assert again.run_id != out.run_id
    by_prefix = store.get(out.run_id[:12])  # what `runs list` prints
    assert by_prefix is not None
    assert by_prefix.id == out.run_id


# The default run has the stronger check: 8 shards of one run at once (pipeline/test_session_shards.py).
@pytest.mark.slow
def test_concurrent_jobs_on_one_sqlite_file_lose_no_row(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    env = {**os.environ, "HYDRA_FULL_ERROR": ""}
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mmlu_track",
                "experiment=smoke",
                "model=fake",
                "device=cpu",
                "tracking=sql_only",
                f"tracking.db_url={db}",
                f"k={k}",
                "limit=20",
                "subjects=[anatomy,virology,marketing]",
                f"hydra.run.dir={tmp_path / f'job{k}'}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(4)
    ]
    errors = [job.communicate(timeout=300)[1] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0, 0, 0], errors
    store = SqlStore(db)
    with Session(store.engine) as s:
        runs = list(s.scalars(select(Run)))
        assert sorted(r.k for r in runs) == [0, 1, 2, 3]
        assert all(r.status == "finished" for r in runs)
        for r in runs:
            n = s.scalar(select(func.count()).select_from(QuestionRow).where(QuestionRow.run_id == r.id))
            assert n == 60


START = synthetic_start()  # one run's settings: every start_or_resume below resumes it


def _set_owner(store: SqlStore, run_id: str, owner: str, heartbeat: datetime) -> None:
    """Pretend another process holds the run's (only) shard."""
    with Session(store.engine) as s, s.begin():
        row = s.get_one(RunShard, (run_id, 1, 0))
        row.owner, row.heartbeat_at = owner, heartbeat


def test_a_live_run_is_never_resumed_by_a_second_process(sqlite_url: str) -> None:
    store = SqlStore(sqlite_url)
    first, _ = store.start_or_resume(START, "same-settings")
    with pytest.raises(RunInProgress, match=f"run {first} with these settings is being evaluated by process"):
        store.start_or_resume(START, "same-settings")  # this process owns it and is alive
    now = datetime.now(UTC).replace(tzinfo=None)
    # Same host, a process that no longer exists (killed): resumed.
    _set_owner(store, first, f"{socket.gethostname()}:{2**22 + 12345}", now)
    assert store.start_or_resume(START, "same-settings")[0] == first
    # Another machine that committed recently: alive; silent for longer than DEAD_AFTER: resumed.
    _set_owner(store, first, "other-host:1", now)
    with pytest.raises(RunInProgress, match="other-host:1"):
        store.start_or_resume(START, "same-settings")
    _set_owner(store, first, "other-host:1", now - DEAD_AFTER - timedelta(minutes=1))
    assert store.start_or_resume(START, "same-settings")[0] == first
    # A failed run is resumed whoever started it.
    store.mark(first, "failed")
    assert store.start_or_resume(START, "same-settings")[0] == first


@pytest.mark.slow  # three interpreters
def test_two_identical_runs_started_together_never_share_a_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    SqlStore(url)
    # Each process holds on until all three have tried: one that has ended is dead to the others,
    # and its run is then rightly theirs to resume (a fixed sleep lost that race on a loaded machine).
    code = (
        "import os, pathlib, time\n"
        "from mmlu_track.store.sql import SqlStore\nfrom mmlu_track.store.liveness import RunInProgress\n"
        "from tests.conftest import synthetic_start\n"
        f"store, here = SqlStore({url!r}), pathlib.Path({str(tmp_path)!r})\n"
        "try:\n"
        "    said = store.start_or_resume(synthetic_start(), 'same')[0]\n"
        "except RunInProgress:\n"
        "    said = 'refused'\n"
        "(here / f'tried-{os.getpid()}').touch()\n"
        "deadline = time.time() + 60\n"
        "while len(list(here.glob('tried-*'))) < 3 and time.time() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print(said)\n"
    )
    procs = [processes.Popen(["-c", code], cwd=ROOT) for _ in range(3)]
    outs = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    assert outs.count("refused") == 2, outs
    assert len(SqlStore(url).runs()) == 1


@pytest.mark.parametrize(
    ("column", "text", "part"),
    [
        ("record_json", "[]", "record"),
        ("stop_json", "{not json", "early_stop"),
        ("protocol_json", "3", "protocol"),
    ],
)
def test_an_unreadable_json_column_is_one_error_naming_the_run(
    sqlite_url: str, column: str, text: str, part: str
) -> None:
    import dataclasses

    from mmlu_track.records.protocol import RecordError

    store = SqlStore(sqlite_url)
    run_id, _ = store.start_or_resume(START, "unreadable")
    stored = store.get(run_id)
    assert stored is not None
    damaged = dataclasses.replace(stored, **{column: text})
    with pytest.raises(RecordError, match=rf"^run {run_id}: "):
        getattr(damaged, part)


def test_runs_list_reads_columns_not_the_record(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 51 item 3: the listing parsed every run's record (5 ms a run: 4.6 s at 1,000 runs); its
    dtype is a column and its limit one key of the settings. A record this version cannot read
    no longer hides them either."""
    from sqlalchemy import update

    from mmlu_track.commands.runs import main as runs_main
    from mmlu_track.store.orm import Run

    store = SqlStore(sqlite_url)
    run_id, _ = store.start_or_resume(START, "listed")
    with store.engine.begin() as conn:
        damaged = {"record_json": "{not json", "model_dtype": "bfloat16"}
        conn.execute(update(Run).where(Run.id == run_id).values(**damaged))
    store.close()
    capsys.readouterr()
    assert runs_main(["--db", sqlite_url, "list"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(run_id[:12])]
    assert " bfloat16 " in row  # before: "?" for dtype and limit
    assert " ? " not in row


def test_runs_list_and_show_tell_seeds_and_circular_runs_apart(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 55 item 1: seed-1, seed-2 and circular runs of one random model looked identical in
    `runs list`, and `runs show` printed `model tiny-random-llama (-)`."""
    from dataclasses import replace

    from mmlu_track.commands.runs import main as runs_main
    from tests.conftest import compose_eval, synthetic_start

    store = SqlStore(sqlite_url)
    ids = {}
    for label, overrides in {
        "seed 1": ["model.tiny_seed=1"],
        "seed 2": ["model.tiny_seed=2"],
        "circular": ["model.tiny_seed=1", "scoring.choice_order=circular"],
    }.items():
        start = synthetic_start(compose_eval(["model=tiny", *overrides]), "tiny-random-llama")
        start = replace(start, model=replace(start.model, revision=None))  # as the tiny model records it
        ids[label], _ = store.start_or_resume(start, label)
    store.close()
    capsys.readouterr()
    assert runs_main(["--db", sqlite_url, "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    row = {label: next(line for line in listed if line.startswith(rid[:12])) for label, rid in ids.items()}
    assert " seed=1 " in row["seed 1"]
    assert " seed=2 " in row["seed 2"]
    assert " logprob " in row["seed 1"]
    assert " seed=1 " in row["circular"]
    assert " logprob/circular " in row["circular"]
    assert runs_main(["--db", sqlite_url, "show", ids["circular"]]) == 0
    (model,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("model ")]
    assert model.startswith("model tiny-random-llama (seed=1, float32), logprob/circular, original, k=5")


def test_runs_show_of_a_prefix_several_runs_share_names_them(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs show 8` matched three runs and said "no run '8'"; now it names them, as compare does."""
    from collections import Counter

    from mmlu_track.commands.runs import main as runs_main

    store = SqlStore(sqlite_url)
    ids = [store.start_or_resume(START, f"{i:064x}")[0] for i in range(17)]  # 17 ids: two share a digit
    store.close()
    digit, count = Counter(i[0] for i in ids).most_common(1)[0]
    capsys.readouterr()
    assert runs_main(["--db", sqlite_url, "show", digit]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"mmlu_track: error: '{digit}' matches {count} runs: ")
    assert line.endswith("; give more of the id")


def test_once_never_makes_a_second_run_of_a_finished_identity(sqlite_url: str) -> None:
    """`start_or_resume(once=True)` (an import): in the claim's own transaction, a finished run of the
    identity is `RunFinished`, never a second run (two imports of the same files at one moment)."""
    from mmlu_track.store.liveness import RunFinished

    from ..conftest import synthetic_run, synthetic_start

    store = SqlStore(sqlite_url)
    done = synthetic_run(store, "m", {"anatomy": [True, False]})
    finished = store.get(done)
    assert finished is not None
    with pytest.raises(RunFinished) as got:
        store.start_or_resume(synthetic_start(), finished.identity, once=True)
    assert got.value.run_id == done
    assert [r.id for r in store.runs()] == [done]
    again, _ = store.start_or_resume(
        synthetic_start(), finished.identity
    )  # without once: a new run, as before
    assert again != done
