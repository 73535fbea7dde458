"""The results database itself: opening it (SQLite set up for concurrent writers), its schema
(Alembic migrations only), and its failures as one-line `StoreError`s.

Schema policy (as MLflow's): an embedded SQLite file and an empty database are upgraded when
opened; a server database (PostgreSQL, ...) at an older revision is refused unless upgraded on
purpose (`python -m mmlu_track.runs --db URL db-upgrade`); a database newer than the code is refused.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session

from mmlu_track.support.credentials import redact, redact_text, unencoded_in_password
from mmlu_track.support.errors import MmluTrackError
from mmlu_track.support.resources import MIGRATIONS_DIR


class StoreError(MmluTrackError):
    """The database cannot be used (unreachable, or its schema is not one this code knows)."""


# What the database layer raises for a database that cannot be used: SQLAlchemy's errors (a URL
# that does not parse, a refused connection, a locked or read-only file, the driver's own errors
# wrapped), sqlite3's raised from a connection hook, the file system's, and a driver that is not
# installed. Anything else escaping a database call is a bug, never "cannot be opened".
DB_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, sqlite3.Error, OSError, ImportError)


class StoreVanished(StoreError):
    """The SQLite file was deleted or replaced under a running process: what it committed is gone."""


def file_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a file, None when it is not there: which file a path names right now."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def busy_timeout() -> float:
    """Seconds a SQLite writer waits for another one (`MMLU_TRACK_SQLITE_BUSY_TIMEOUT`, default 60)."""
    raw = os.environ.get("MMLU_TRACK_SQLITE_BUSY_TIMEOUT", "60")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise StoreError(f"MMLU_TRACK_SQLITE_BUSY_TIMEOUT={raw!r} must be a number of seconds above 0")
    return value


def parse_url(url: str) -> URL:
    """A results database's URL, parsed; a malformed one is one line that repeats none of it (it
    may hold a password, and a URL that does not parse cannot be masked by parsing)."""
    if unencoded_in_password(url, "@/?#"):  # SQLAlchemy would read the rest of it as the host
        raise StoreError(
            "the results database URL's password holds a raw @ / ? or #: write them percent-encoded "
            "(%40 %2F %3F %23: p@ss is written p%40ss)"
        )
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as err:
        # SQLAlchemy's own words name no part of the URL; a ValueError's (a port's int()) may.
        said = str(err).splitlines()[0] if isinstance(err, ArgumentError) else type(err).__name__
        raise StoreError(
            f"the results database URL is malformed ({said}): write a SQLAlchemy URL, e.g. "
            "sqlite:///path/to/file.db or postgresql+psycopg://HOST:5432/DB (the user and password "
            "before the host, their special characters percent-encoded)"
        ) from None


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None: another backend, memory, or a `file:` URI)."""
    parsed = parse_url(url)
    db = parsed.database
    if parsed.get_backend_name() != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db).expanduser().resolve()


# SqlStore._session (write or not): how the store's members (noise floors, comparisons) open theirs
Sessions = Callable[[bool], AbstractContextManager[Session]]
READ_ONLY = "mmlu_track_read_only"  # an execution option: this connection's transactions only read


def reading(engine: Engine) -> Engine:
    """The same engine (one pool) for sessions that only read: SQLite begins their transactions
    deferred, so they never hold up a writer; other databases ignore the option."""
    return engine.execution_options(**{READ_ONLY: True})


def check_folder(database: Path, *, new: bool = False) -> None:
    """A SQLite file's folder must exist: the file is the user's to name, and a folder they did not
    make is never made for it (a typo in a path would leave a new tree behind, the results in it).
    `new`: the file is still to be made, so the folder must be writable too."""
    folder = database.expanduser().absolute().parent
    if not folder.is_dir():
        raise StoreError(
            f"the results database's folder {folder} does not exist: create it, or give "
            "tracking.db_url a file in an existing folder"
        )
    if new and not os.access(folder, os.W_OK):
        raise StoreError(
            f"the results database {database} cannot be created: its folder {folder} is not "
            "writable; give tracking.db_url a file in a folder you can write"
        )


def _wal(cursor: Any, busy: float) -> None:
    """`PRAGMA journal_mode=WAL`, asked again while the database is locked, up to `busy` seconds.
    A file another process is creating is still in rollback mode: switching needs its exclusive
    lock, and SQLite answers "database is locked" at once, busy timeout or not, where waiting could
    deadlock (`sqlite3_busy_handler`'s documentation). Processes opening one fresh store together
    (runs started at once in a new folder, a launch's shards) met it about once in ten."""
    deadline = time.monotonic() + busy
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def make_engine(url: str) -> Engine:
    """A new engine for the results database at `url`; its schema is neither checked nor made (`upgrade`).
    SQLite: its folder must exist (`StoreError`), writers wait `busy_timeout()` for each other, WAL,
    foreign keys on, a writer's transaction takes the write lock as it begins. A server's connections
    are checked before use. A malformed URL is a `StoreError`; SQLAlchemy's and a missing driver's
    errors are raised as they are (`open_engine` makes them one line)."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
        check_folder(Path(parsed.database))
    busy = busy_timeout()
    engine = create_engine(url, connect_args={"timeout": busy})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (see "begin" below).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(busy * 1000)}")  # wait for other writers instead of failing
        _wal(cur, busy)  # readers never block the writer
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A writer takes the write lock up front: concurrent writers (and concurrent Alembic
        # upgrades) queue on busy_timeout instead of failing on a read-to-write lock upgrade. A
        # reader (`reading(engine)`) begins a deferred transaction: under WAL it takes no lock a
        # writer waits on, and it never writes.
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")

    return engine


def open_engine(url: str) -> Engine:
    """`make_engine`, with a malformed URL or a missing driver as one-line `StoreError`."""
    try:
        return make_engine(url)
    except DB_ERRORS as err:
        raise db_error(url, err, "cannot be opened") from err


MIGRATION_LOCK = 0x6D6D6C75  # "mmlu": the advisory lock key taken while migrating a server database


def _alembic_config() -> Any:
    from alembic.config import Config

    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


@functools.cache
def _revisions() -> tuple[str, frozenset[str]]:
    """(head, every revision) of the migrations this package ships, read once per process: Alembic
    loads each script to learn them (compiling it where no bytecode may be written, as in images
    with PYTHONDONTWRITEBYTECODE), and a process opens its store many times (a sweep, a gate)."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(_alembic_config())
    head = scripts.get_current_head()
    if head is None:
        raise StoreError(f"no schema migration found in {MIGRATIONS_DIR}: reinstall mmlu_track")
    return head, frozenset(s.revision for s in scripts.walk_revisions())


def upgrade(engine: Engine, *, shared: bool = False) -> str:
    """Bring the database to the newest migration; return that revision.

    Policy (as MLflow's): an embedded SQLite file and an empty database are upgraded here; a server
    database (PostgreSQL, ...) at an older revision is refused unless `shared` (the explicit
    `runs db-upgrade` command), so one newer client never migrates a store older clients still use.
    """
    # Alembic narrates every step (its imports too) at INFO, which Hydra's logging setup would print.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    cfg = _alembic_config()
    head, known = _revisions()
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    if current is not None and current not in known:
        raise StoreError(
            f"database schema {current} is newer than this mmlu_track (head {head}): upgrade mmlu_track"
        )
    if current not in (None, head) and engine.dialect.name != "sqlite" and not shared:
        raise StoreError(
            f"the results database {redact(engine.url.render_as_string(hide_password=True))} has schema "
            f"{current}, "
            f"this mmlu_track needs {head}: upgrade it once with "
            "`python -m mmlu_track.runs --db URL db-upgrade` (clients older than this one then refuse it)"
        )
    if current != head:
        with engine.begin() as conn:
            # Processes opening one fresh database together (the shards of a run) must not all
            # create the tables: the first migrates, the others wait here and find it done.
            # SQLite's BEGIN IMMEDIATE already serialises this; a server needs a lock of its own.
            if engine.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
            if MigrationContext.configure(conn).get_current_revision() != head:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                if engine.dialect.name == "sqlite":
                    # Statistics for the planner: without them SQLite picks the status index over the
                    # model-name one for a model's finished runs (PostgreSQL's autovacuum keeps its own).
                    conn.exec_driver_sql("ANALYZE")
    return head


def db_error(url: str, err: Exception, what: str) -> StoreError:
    """One line naming the database (its password as `***`) and what the driver said."""
    text = str(getattr(err, "orig", None) or err).splitlines()[0]
    # A driver may quote the URL it was given (an unparsable one, say): never with its password.
    text = redact_text(text.replace(url, redact(url)))
    url = redact(url)
    if "locked" in text:
        return StoreError(
            f"the results database {url} stayed locked by another process (waited {busy_timeout():g} s)"
        )
    if "readonly" in text:
        return StoreError(
            f"the results database {url} is read-only ({text}): make the file and its folder writable, "
            "or point tracking.db_url elsewhere"
        )
    return StoreError(f"the results database {url} {what}: {text}")
