"""The SQL results store: any SQLAlchemy URL; SQLite by default, opened for concurrent writers.

The schema comes only from the Alembic migrations in `migrations/`; `SqlStore` upgrades the
database to head when it opens it and refuses one newer than this code. Results are committed
per subject, so a killed run loses at most the subject in progress and resumes from there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, delete, event, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from mmlu_track.config import ConfigError, EvalConfig, eval_config_from_dict
from mmlu_track.eval.results import Accuracy, QuestionResult
from mmlu_track.resources import MIGRATIONS_DIR
from mmlu_track.store.orm import ComparisonRow, QuestionRow, Run, SubjectScore
from mmlu_track.store.record import RecordError, RunRecord

UNFINISHED = ("running", "failed")


class StoreError(RuntimeError):
    """The database cannot be used (unreachable, or its schema is not one this code knows)."""


class RunInProgress(StoreError):
    """Another live process is evaluating the run this one would resume."""


# A run on another machine whose last commit is older than this is taken as dead (a subject can
# take tens of minutes on a CPU, so this is generous).
STALE_AFTER = timedelta(hours=2)


def current_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive(run: Run, now: datetime) -> bool:
    """Is the process recorded as evaluating `run` still there?"""
    if run.status != "running" or not run.owner:
        return False  # failed, or recorded before owners were (then resumable, as always)
    host, _, pid = run.owner.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # it exists, owned by another user
        return True
    last = run.heartbeat_at or run.created_at
    return now - last < STALE_AFTER


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


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    busy = busy_timeout()
    engine = create_engine(url, connect_args={"timeout": busy})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (see "begin" below).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(busy * 1000)}")  # wait for other writers instead of failing
        cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Take the write lock up front: concurrent writers (and concurrent Alembic upgrades)
        # queue on busy_timeout instead of failing on a read-to-write lock upgrade.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def open_engine(url: str) -> Engine:
    """`make_engine`, with a malformed URL or a missing driver as one-line `StoreError`."""
    try:
        return make_engine(url)
    except StoreError:
        raise
    except Exception as err:
        raise db_error(url, err, "cannot be opened") from err


def upgrade(engine: Engine, *, shared: bool = False) -> str:
    """Bring the database to the newest migration; return that revision.

    Policy (as MLflow's): an embedded SQLite file and an empty database are upgraded here; a server
    database (PostgreSQL, ...) at an older revision is refused unless `shared` (the explicit
    `runs db-upgrade` command), so one newer client never migrates a store older clients still use.
    """
    # Alembic narrates every step (its imports too) at INFO, which Hydra's logging setup would print.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(cfg).get_current_head()
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    known = {s.revision for s in ScriptDirectory.from_config(cfg).walk_revisions()}
    if current is not None and current not in known:
        raise StoreError(
            f"database schema {current} is newer than this mmlu_track (head {head}): upgrade mmlu_track"
        )
    if current not in (None, head) and engine.dialect.name != "sqlite" and not shared:
        raise StoreError(
            f"the results database {engine.url.render_as_string(hide_password=True)} has schema {current}, "
            f"this mmlu_track needs {head}: upgrade it once with "
            "`python -m mmlu_track.runs --db URL db-upgrade` (clients older than this one then refuse it)"
        )
    if current != head:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    assert head is not None
    return head


@dataclass(frozen=True)
class RunMeta:
    """What identifies a run before it has results."""

    identity: str
    model_name: str
    model_revision: str | None
    scoring: str
    formulation: str
    k: int
    data_fingerprint: str
    template_hash: str
    git_commit: str | None
    config: dict[str, Any]
    n_questions: int
    output_dir: str | None
    sweep: str | None


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _to_row(run_id: str, r: QuestionResult) -> QuestionRow:
    lp = r.logprobs or (None, None, None, None)
    return QuestionRow(
        run_id=run_id, subject=r.subject, question_index=r.index, prompt_hash=r.prompt_hash,
        shots_used=r.shots_used, n_tokens=r.n_tokens, truncated=r.truncated,
        logprob_a=lp[0], logprob_b=lp[1], logprob_c=lp[2], logprob_d=lp[3],
        generated=r.generated, prediction=r.prediction, gold=r.gold, correct=r.correct, margin=r.margin,
    )  # fmt: skip


def _from_row(row: QuestionRow) -> QuestionResult:
    lps = (row.logprob_a, row.logprob_b, row.logprob_c, row.logprob_d)
    return QuestionResult(
        subject=row.subject, index=row.question_index, prompt_hash=row.prompt_hash,
        shots_used=row.shots_used, n_tokens=row.n_tokens, truncated=row.truncated,
        logprobs=None if lps[0] is None else (lps[0], lps[1], lps[2], lps[3]),  # type: ignore[arg-type]
        generated=row.generated, prediction=row.prediction, gold=row.gold, margin=row.margin,
    )  # fmt: skip


def db_error(url: str, err: Exception, what: str) -> StoreError:
    text = str(getattr(err, "orig", None) or err).splitlines()[0]
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


def record_of(run: Run) -> RunRecord | None:
    """A finished run's typed record (None while it is unfinished)."""
    if not run.record_json:
        return None
    try:
        return RunRecord.from_json(json.loads(run.record_json))
    except (ValueError, RecordError) as err:
        raise StoreError(f"run {run.id}: {err}") from err


def config_of(run: Run) -> EvalConfig:
    """The settings a run was started with."""
    try:
        return eval_config_from_dict(json.loads(run.config_json))
    except (ValueError, ConfigError) as err:
        raise StoreError(f"run {run.id} was recorded with settings this version cannot read: {err}") from err


class SqlStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = open_engine(url)
        try:
            self.revision = upgrade(self.engine)
        except Exception as err:
            self.engine.dispose()  # a refused store keeps no connection open
            if isinstance(err, StoreError):
                raise
            raise db_error(url, err, "cannot be opened") from err  # driver errors vary by backend

    @contextlib.contextmanager
    def _session(self, write: bool = False) -> Iterator[Session]:
        """One session (one transaction when `write`); database failures become `StoreError`."""
        try:
            with Session(self.engine, expire_on_commit=False) as s:
                if write:
                    with s.begin():
                        yield s
                else:
                    yield s
        except SQLAlchemyError as err:
            raise db_error(self.url, err, "failed") from err

    def close(self) -> None:
        """Close pooled connections (servers such as PostgreSQL otherwise keep them open)."""
        self.engine.dispose()

    def start_or_resume(self, meta: RunMeta) -> tuple[str, dict[str, list[QuestionResult]]]:
        """The newest unfinished run with the same identity and its committed subjects, or a new run.

        Atomic: the lookup and the claim happen in one transaction holding the write lock (SQLite)
        or the row lock (other servers), so two processes never both take one run; a run whose
        owner is alive is refused (`RunInProgress`), one whose owner died is resumed.
        """
        now = _now()
        with self._session(write=True) as s:
            run = s.scalars(
                select(Run)
                .where(Run.identity == meta.identity, Run.status.in_(UNFINISHED))
                .order_by(Run.created_at.desc())
                .limit(1)
                .with_for_update()
            ).first()
            if run is not None and _alive(run, now):
                raise RunInProgress(
                    f"run {run.id} with these settings is being evaluated by process {run.owner} "
                    f"(last commit {run.heartbeat_at or run.created_at:%Y-%m-%d %H:%M} UTC): wait for it, "
                    "or stop it and run the same command again to resume; tracking.resume=false starts "
                    "a separate run"
                )
            if run is None:
                run = Run(
                    id=uuid.uuid4().hex, identity=meta.identity, status="running",
                    model_name=meta.model_name, model_revision=meta.model_revision, scoring=meta.scoring,
                    formulation=meta.formulation, k=meta.k, data_fingerprint=meta.data_fingerprint,
                    template_hash=meta.template_hash, git_commit=meta.git_commit,
                    config_json=json.dumps(meta.config), n_questions=meta.n_questions,
                    output_dir=meta.output_dir, sweep=meta.sweep, created_at=now,
                    owner=current_owner(), heartbeat_at=now,
                )  # fmt: skip
                s.add(run)
                return run.id, {}
            run.status = "running"
            run.owner, run.heartbeat_at = current_owner(), now
            run.output_dir = meta.output_dir
            done: dict[str, list[QuestionResult]] = {}
            rows = s.scalars(
                select(QuestionRow).where(QuestionRow.run_id == run.id).order_by(QuestionRow.question_index)
            )
            for row in rows:
                done.setdefault(row.subject, []).append(_from_row(row))
            return run.id, done

    def save_subject(self, run_id: str, subject: str, results: Sequence[QuestionResult]) -> None:
        """Commit one subject's questions and score in one transaction (replacing any earlier try)."""
        acc = Accuracy.of([r.correct for r in results])
        with self._session(write=True) as s:
            s.execute(delete(QuestionRow).where(QuestionRow.run_id == run_id, QuestionRow.subject == subject))
            s.execute(
                delete(SubjectScore).where(SubjectScore.run_id == run_id, SubjectScore.subject == subject)
            )
            s.add_all(_to_row(run_id, r) for r in results)
            s.get_one(Run, run_id).heartbeat_at = _now()
            s.add(
                SubjectScore(
                    run_id=run_id,
                    subject=subject,
                    n=acc.n,
                    correct=acc.correct,
                    acc=acc.acc,
                    stderr=acc.stderr,
                )
            )

    def finish(self, record: RunRecord, output_dir: str | None = None) -> None:
        with self._session(write=True) as s:
            run = s.get_one(Run, record.run_id)
            run.status = "finished"
            if output_dir is not None:
                run.output_dir = output_dir
            run.finished_at = _now()
            run.record_json = json.dumps(record.to_json())
            run.acc_micro = record.scores.micro.acc
            run.acc_macro = record.scores.macro.acc

    def mark(self, run_id: str, status: str) -> None:
        with self._session(write=True) as s:
            s.get_one(Run, run_id).status = status

    def set_mlflow_run(self, run_id: str, mlflow_run_id: str, *, synced: bool) -> None:
        """The MLflow run this run logs to; `synced` once everything is logged there."""
        with self._session(write=True) as s:
            run = s.get_one(Run, run_id)
            run.mlflow_run_id = mlflow_run_id
            run.mlflow_synced_at = _now() if synced else None

    def runs(self, limit: int = 50, unsynced: bool = False) -> list[Run]:
        query = select(Run).order_by(Run.created_at.desc()).limit(limit)
        if unsynced:
            query = query.where(Run.status == "finished", Run.mlflow_synced_at.is_(None))
        with self._session() as s:
            return list(s.scalars(query))

    def find(self, ref: str) -> list[Run]:
        """Runs that `ref` names: its id, its MLflow run id, or every run whose id starts with it."""
        with self._session() as s:
            run = s.get(Run, ref) or s.scalars(select(Run).where(Run.mlflow_run_id == ref)).first()
            if run is not None:
                return [run]
            query = select(Run).where(Run.id.startswith(ref, autoescape=True)).order_by(Run.created_at.desc())
            return list(s.scalars(query.limit(20)))

    def get(self, run_id: str) -> Run | None:
        """A run by id, by a unique prefix of it, or by its MLflow run id."""
        found = self.find(run_id)
        return found[0] if len(found) == 1 else None

    def question_results(self, run_id: str) -> list[QuestionResult]:
        with self._session() as s:
            rows = s.scalars(
                select(QuestionRow)
                .where(QuestionRow.run_id == run_id)
                .order_by(QuestionRow.subject, QuestionRow.question_index)
            )
            return [_from_row(r) for r in rows]

    def finished_runs(self, model_name: str) -> list[Run]:
        """A model's finished runs, newest first (the gate picks a comparable one among them)."""
        query = select(Run).where(Run.model_name == model_name, Run.status == "finished")
        with self._session() as s:
            return list(s.scalars(query.order_by(Run.created_at.desc())))

    def save_comparison(self, row: ComparisonRow) -> None:
        with self._session(write=True) as s:
            s.add(row)

    def set_comparison_mlflow(self, comparison_id: str, mlflow_run_id: str) -> None:
        with self._session(write=True) as s:
            s.get_one(ComparisonRow, comparison_id).mlflow_run_id = mlflow_run_id
