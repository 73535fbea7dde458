"""The SQL store on a real PostgreSQL server (a throwaway cluster; skipped where none is installed).

Set MMLU_TRACK_TEST_PG_URL to use an existing server instead (its database must be empty).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from mmlu_track.commands.runs import main as runs_main
from mmlu_track.pipeline.evaluate import QUIET, Display, run
from mmlu_track.store.db import StoreError
from mmlu_track.store.orm import Base
from mmlu_track.store.sql import SqlStore

from .. import processes
from ..conftest import tiny_run_cfg


def test_store_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    from alembic import command

    from mmlu_track.support.resources import MIGRATIONS_DIR

    store = SqlStore(postgres_url)
    with store.engine.connect() as conn:
        assert store.engine.dialect.name == "postgresql"
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    out = run(tiny_run_cfg(postgres_url), tmp_path / "out", display=QUIET)
    # resume=false makes a fresh identity that must still fit the column (PostgreSQL enforces lengths).
    fresh = run(
        tiny_run_cfg(postgres_url, "tracking.resume=false"),
        tmp_path / "f",
        display=Display(print, progress=False),
    )
    assert fresh.run_id != out.run_id
    stored = store.get(out.run_id)
    assert stored is not None
    assert stored.status == "finished"
    assert store.question_results(out.run_id) == sorted(out.results, key=lambda r: (r.subject, r.index))

    from alembic.config import Config

    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")  # a shared store left at an older schema by older clients
    store.engine.dispose()
    head = sorted(p.stem[:4] for p in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"))[-1]
    older = f"has schema 0002, this mmlu_track needs {head}: upgrade it once with"
    with pytest.raises(StoreError, match=older):
        SqlStore(postgres_url)
    assert runs_main(["--db", postgres_url, "db-upgrade"]) == 0
    SqlStore(postgres_url).close()  # now at head: opens
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    store.engine.dispose()


def test_processes_opening_a_fresh_database_together_migrate_it_once(postgres_url: str) -> None:
    """The shards of a run start together against an empty server database: one migrates it."""
    code = f"from mmlu_track.store.sql import SqlStore; SqlStore({postgres_url!r}).close(); print('ok')"
    procs = [processes.Popen(["-c", code]) for _ in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [out.strip() for out, _ in outs] == ["ok"] * 6, [err[-400:] for _, err in outs]


def test_a_shared_store_of_the_previous_release_is_restamped_by_db_upgrade(
    postgres_url: str, tmp_path: Path
) -> None:
    """Migration 0016 on PostgreSQL (issue 86): the previous release's runs (tests/data/store_0015.sql,
    copied row by row into a server database at schema 0015) get their role and canonical identities
    by `runs db-upgrade`, and today's command reuses them."""
    import sqlite3

    from alembic import command
    from alembic.config import Config
    from sqlalchemy import MetaData, create_engine, select

    from mmlu_track.support.resources import MIGRATIONS_DIR

    from ..pipeline.test_canonical import DUMP, REORDERED

    legacy = tmp_path / "legacy.db"
    with sqlite3.connect(legacy) as conn:
        conn.executescript(DUMP.read_text(encoding="utf-8"))
    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    server = create_engine(postgres_url)
    with server.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0015")
    source, target = MetaData(), MetaData()
    lite = create_engine(f"sqlite:///{legacy}")
    source.reflect(lite)
    target.reflect(server)
    with lite.connect() as src, server.begin() as dst:
        for name in ("runs", "run_shards", "subject_scores", "question_results", "noise_floors"):
            rows = [dict(r._mapping) for r in src.execute(select(source.tables[name]))]
            for row in rows:  # SQLite keeps booleans as 0/1 and times as text: as the server's columns
                for col in target.tables[name].columns:
                    if str(col.type) == "BOOLEAN" and row.get(col.name) is not None:
                        row[col.name] = bool(row[col.name])
            if rows:
                dst.execute(target.tables[name].insert(), rows)
    server.dispose()
    assert runs_main(["--db", postgres_url, "db-upgrade"]) == 0
    store = SqlStore(postgres_url)
    roles = [r.role for r in store.runs(limit=100)]
    assert roles.count("noise") == 5
    out = run(
        tiny_run_cfg(postgres_url, "subjects=[anatomy,marketing]", model="tiny"),
        tmp_path / "o",
        display=QUIET,
    )
    assert out.run_id.startswith(REORDERED)  # the stored run in the other order, taken as it is
    store.close()
