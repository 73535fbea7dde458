"""The SQL store on a real PostgreSQL server (a throwaway cluster; skipped where none is installed).

Set MMLU_TRACK_TEST_PG_URL to use an existing server instead (its database must be empty).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from mmlu_track.eval.pipeline import run
from mmlu_track.runs import main as runs_main
from mmlu_track.store.orm import Base
from mmlu_track.store.sql import SqlStore, StoreError

from .conftest import tiny_run_cfg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    if url := os.environ.get("MMLU_TRACK_TEST_PG_URL"):
        yield url
        return
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin"))  # Debian's layout, not on PATH
    path = os.pathsep.join([os.environ.get("PATH", ""), *map(str, installed)])
    initdb, pg_ctl = shutil.which("initdb", path=path), shutil.which("pg_ctl", path=path)
    if not (initdb and pg_ctl):
        if os.environ.get("CI"):  # CI installs the server (.ci/run): a skip there hides a missing step
            pytest.fail("no PostgreSQL server binaries (initdb, pg_ctl): install Debian's postgresql")
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    as_user: list[str] = []
    data = Path(tempfile.mkdtemp(prefix="mmlu_track_pg_"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        try:
            shutil.chown(data, user="postgres")
        except LookupError:
            pytest.skip("running as root and there is no 'postgres' user to run the server")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    try:
        subprocess.run(
            [*as_user, initdb, "-D", str(data / "db"), "-A", "trust", "-U", "postgres", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [*as_user, pg_ctl, "-D", str(data / "db"), "-o", opts, "-l", str(data / "log"), "-w", "start"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    except subprocess.CalledProcessError as err:
        pytest.fail(f"could not start PostgreSQL: {err.stderr!r}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, pg_ctl, "-D", str(data / "db"), "-m", "immediate", "stop"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(data, ignore_errors=True)


def test_store_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    from alembic import command

    from mmlu_track.store.sql import MIGRATIONS_DIR

    store = SqlStore(postgres_url)
    with store.engine.connect() as conn:
        assert store.engine.dialect.name == "postgresql"
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    out = run(tiny_run_cfg(postgres_url), tmp_path / "out", progress=False, echo=lambda _: None)
    # resume=false makes a fresh identity that must still fit the column (PostgreSQL enforces lengths).
    fresh = run(
        tiny_run_cfg(postgres_url, "tracking.resume=false"), tmp_path / "f", progress=False, echo=print
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
    with pytest.raises(StoreError, match="has schema 0002, this mmlu_track needs 0004: upgrade it once with"):
        SqlStore(postgres_url)
    assert runs_main(["--db", postgres_url, "db-upgrade"]) == 0
    SqlStore(postgres_url).close()  # now at head: opens
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    store.engine.dispose()
