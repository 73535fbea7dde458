"""store/liveness.py: a run is judged dead by its own `tracking.dead_after_s`, wherever it is read."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.orm import Session

from mmlu_track.store.liveness import DEAD_AFTER, dead_after_of
from mmlu_track.store.orm import Run, RunShard
from mmlu_track.store.sql import SqlStore

from ..conftest import CliResult, compose_eval, synthetic_start


def _running(store: SqlStore, *overrides: str, silent_for: timedelta) -> str:
    """A run claimed by a process on another host that last beat `silent_for` ago."""
    cfg = compose_eval(["model=tiny", *overrides])
    run_id, _ = store.start_or_resume(synthetic_start(cfg), os.urandom(32).hex())
    beat = datetime.now(UTC).replace(tzinfo=None) - silent_for
    alive = {"status": "running", "owner": "node-7:4242:99:abcd1234", "heartbeat_at": beat}
    with Session(store.engine) as s, s.begin():
        s.execute(update(Run).where(Run.id == run_id).values(**alive))
        s.execute(update(RunShard).where(RunShard.run_id == run_id).values(**alive))
    return str(run_id)


def test_runs_list_and_show_judge_a_run_by_its_own_dead_after(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """`runs list` / `runs show` judged every run dead after a fixed 150 s: a run started with
    `tracking.dead_after_s=20` and silent for a minute was still "running"."""
    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(db)
    quiet = timedelta(seconds=60)
    quick = _running(store, "tracking.dead_after_s=20", "tracking.heartbeat_s=5", silent_for=quiet)
    patient = _running(store, "tracking.dead_after_s=600", silent_for=timedelta(seconds=300))
    runs = {r.id: r for r in store.runs()}
    assert dead_after_of(runs[quick], DEAD_AFTER) == timedelta(seconds=20)
    assert "has not beaten for over 20 s" in (store.dead(runs[quick]) or "")
    assert store.dead(runs[patient]) is None  # 300 s silent: dead by the default, alive by its own 600
    store.close()
    listed = cli("runs", "--db", db, "list", cwd=tmp_path).out
    assert {line[:12]: line.split()[1] for line in listed.splitlines()[1:]} == {
        quick[:12]: "dead",
        patient[:12]: "running",
    }
    shown = cli("runs", "--db", db, "show", quick, cwd=tmp_path).out
    assert "status dead (process node-7:4242 has not beaten for over 20 s" in shown


def test_a_run_whose_settings_cannot_be_read_falls_back_to_the_readers_dead_after(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    run_id = _running(store, silent_for=timedelta(seconds=10))
    with Session(store.engine) as s, s.begin():
        s.execute(update(Run).where(Run.id == run_id).values(config_json='{"model": 3}'))
    (run,) = store.runs()
    assert dead_after_of(run, timedelta(seconds=7)) == timedelta(seconds=7)
    store.close()
