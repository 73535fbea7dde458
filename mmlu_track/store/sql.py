"""The SQL results store: any SQLAlchemy URL; SQLite by default, opened for concurrent writers.

The schema comes only from the Alembic migrations in `migrations/` (see `db.py`). Results are
committed unit by unit, so a killed run loses at most the unit in progress and resumes from there;
the shards of one run claim their shard (`run_shards`) and commit into the same run, and exactly
one of them finalizes it (`claim_finalization`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta

from sqlalchemy import case, delete, func, select, text, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from mmlu_track.records.results import QuestionResult
from mmlu_track.records.run import EarlyStop, RunRecord, RunRole, RunStart
from mmlu_track.records.stored import (
    ACTIVE,
    UNFINISHED,
    RunStatus,
    ShardStatus,
    ShardWork,
    StoredRun,
    StoredShard,
)
from mmlu_track.settings.config import TrackingConfig
from mmlu_track.store.comparisons import Comparisons
from mmlu_track.store.db import (
    DB_ERRORS,
    StoreError,
    StoreVanished,
    db_error,
    file_id,
    open_engine,
    reading,
    sqlite_file,
    upgrade,
)
from mmlu_track.store.liveness import (
    DEAD_AFTER,
    WHOLE_RUN,
    RunFinished,
    Shard,
    current_owner,
    dead_after_of,
    liveness,
    scheduler,
    take_over,
)
from mmlu_track.store.noise_floors import NoiseFloors
from mmlu_track.store.orm import QuestionRow, Run, RunShard, SubjectScore
from mmlu_track.store.rows import (
    COLUMNS,
    Batched,
    batched_as,
    from_columns,
    new_run,
    newest,
    stored,
    taken_by,
    to_row,
    utc_now,
    with_noise,
)
from mmlu_track.support.credentials import redact


def open_store(tracking: TrackingConfig) -> SqlStore:
    """The store a run's or a comparison's tracking settings name."""
    return SqlStore(tracking.db_url, timedelta(seconds=tracking.dead_after_s))


def open_existing_store(tracking: TrackingConfig) -> SqlStore:
    """The store a comparison reads: refused in one line when it is a SQLite file that does not
    exist (reading must not create an empty store, then say "unknown run")."""
    path = sqlite_file(tracking.db_url)
    if path is not None and not path.exists():
        raise StoreError(
            f"no results database at {path}: no run is recorded there yet; give tracking.db_url= the "
            "store that holds the runs"
        )
    return open_store(tracking)


class SqlStore:
    """The results store at one SQLAlchemy URL: runs, their shards' claims and their questions, the
    noise measurements (`noise`) and the gate's verdicts (`comparisons`). Database failures are
    one-line `StoreError`s."""

    def __init__(self, url: str, dead_after: timedelta = DEAD_AFTER) -> None:
        """Open `url` and bring its schema up to date (`db.upgrade`), or `StoreError` (it cannot be
        opened, or its schema is refused). `dead_after`: the silence after which a process claiming a
        run counts as dead, for a run whose settings this version cannot read."""
        self.url = redact(url)  # for messages: the engine alone holds the password
        self.dead_after = dead_after
        self.engine = open_engine(url)
        self.noise = NoiseFloors(self._session)  # the noise measurements: their rows and MLflow runs
        self.comparisons = Comparisons(self._session)  # the gate's verdicts
        try:
            self.revision = upgrade(self.engine)
        except DB_ERRORS as err:
            self.engine.dispose()  # a refused store keeps no connection open
            raise db_error(url, err, "cannot be opened") from err  # driver errors vary by backend
        except BaseException:
            self.engine.dispose()
            raise
        # An open SQLite connection writes on into a deleted file, and a new one into whatever file
        # now has the name: every write first checks that the file is still the one opened.
        self._file = sqlite_file(url)
        self._file_id = file_id(self._file) if self._file else None
        self._reader = reading(self.engine)  # read sessions: deferred, never holding up a writer

    def _check_file(self) -> None:
        if self._file is None or file_id(self._file) == self._file_id:
            return
        what = "deleted" if not self._file.exists() else "replaced by another file"
        raise StoreVanished(
            f"the results database {self._file} was {what} while this process was using it: "
            "what it had committed there is gone"
        )

    @contextlib.contextmanager
    def _session(self, write: bool = False) -> Iterator[Session]:
        """One session (one transaction when `write`); database failures become `StoreError`."""
        if write:
            self._check_file()
        try:
            with Session(self.engine if write else self._reader, expire_on_commit=False) as s:
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

    def start_or_resume(
        self,
        start: RunStart,
        identity: str,
        shard: Shard = WHOLE_RUN,
        output_dir: str | None = None,
        batching: Batched | None = None,
        once: bool = False,
    ) -> tuple[str, dict[str, list[QuestionResult]]]:
        """The newest unfinished run with the same identity and its committed questions by subject,
        or a new run; this process takes `shard` of it; with `batching`, only a run scored at it (the
        noise command's roles: batching is no part of the identity, yet what it measures). `once`:
        never a second run of an identity that has a finished one (`RunFinished`: an import of files
        another process imported at the same moment). The start's role is the new run's, and says
        which runs it may resume (`rows.taken_by`).

        Atomic: the lookup and the claim happen in one transaction holding the write lock (SQLite)
        or an advisory lock on the identity and the run's row lock (PostgreSQL), so two processes
        never create one run twice nor both take one shard. A shard whose process is alive is
        refused (`RunInProgress`); one whose process died is taken over. Other shards of the same
        run are claimed by their own processes at the same time.
        """
        now = utc_now()
        with self._session(write=True) as s:
            if self.engine.dialect.name == "postgresql":  # no row to lock yet when the run is new
                s.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": int(identity[:15], 16)})
            mine = select(Run).where(Run.identity == identity, Run.status.in_(UNFINISHED))
            query = newest(mine.where(*taken_by(start.role)), batching)
            run = next((r for r in s.scalars(query.with_for_update()) if batched_as(r, batching)), None)
            if run is None and once:
                finished = select(Run.id).where(Run.identity == identity, Run.status == RunStatus.FINISHED)
                if (done_id := s.scalars(finished.limit(1)).first()) is not None:
                    raise RunFinished(done_id)
            if run is None:
                run = new_run(start, identity, output_dir)
                s.add(run)
                s.flush()
                claim = RunShard(run_id=run.id, shards=shard.count, shard=shard.index)
                claim.status, claim.owner, claim.heartbeat_at = ShardStatus.RUNNING, str(current_owner()), now
                claim.scheduler = scheduler()
                s.add(claim)
                return run.id, {}
            take_over(s, run, shard, output_dir, now, self.dead_after)
            done: dict[str, list[QuestionResult]] = {}
            rows = s.connection().execute(  # plain rows, no ORM loading (`rows.COLUMNS`)
                select(*COLUMNS).where(QuestionRow.run_id == run.id).order_by(QuestionRow.question_index)
            )
            for row in rows:
                done.setdefault(row[0], []).append(from_columns(row))
            return run.id, done

    def save_unit(self, run_id: str, results: Sequence[QuestionResult], shard: Shard = WHOLE_RUN) -> None:
        """Commit one unit (questions of one subject) in one transaction, replacing any earlier try."""
        subject = results[0].subject
        if any(r.subject != subject for r in results):
            raise StoreError(
                f"a unit holds one subject's questions, got {sorted({r.subject for r in results})}"
            )
        now = utc_now()
        with self._session(write=True) as s:
            s.execute(
                delete(QuestionRow).where(
                    QuestionRow.run_id == run_id,
                    QuestionRow.subject == subject,
                    QuestionRow.question_index.in_([r.index for r in results]),
                )
            )
            s.add_all(to_row(run_id, r) for r in results)
            s.get_one(Run, run_id).heartbeat_at = now
            if claim := s.get(RunShard, (run_id, shard.count, shard.index)):
                claim.heartbeat_at = now

    def beat(self, run_id: str, shard: Shard) -> None:
        """This process is alive and at work on `shard` of the run (and, finalizing, on the run)."""
        now = utc_now()
        me = str(current_owner())
        with self._session(write=True) as s:
            mine = (RunShard.run_id == run_id, RunShard.shards == shard.count, RunShard.shard == shard.index)
            s.execute(update(RunShard).where(*mine, RunShard.owner == me).values(heartbeat_at=now))
            s.execute(update(Run).where(Run.id == run_id, Run.owner == me).values(heartbeat_at=now))

    def dead(self, run: StoredRun) -> str | None:
        """Why a run that should be at work (running, finalizing) is not: every process on it is
        dead (see `liveness`); None when one is alive, or the run is in another state."""
        if run.status not in ACTIVE:
            return None
        now = utc_now()
        dead_after = dead_after_of(run, self.dead_after)
        if run.status == RunStatus.FINALIZING:
            return liveness(run.owner, run.heartbeat_at, now, dead_after)
        with self._session() as s:
            claims = list(
                s.scalars(
                    select(RunShard).where(RunShard.run_id == run.id, RunShard.status == ShardStatus.RUNNING)
                )
            )
        if not claims:
            return liveness(run.owner, run.heartbeat_at, now, dead_after)
        reasons = [liveness(c.owner, c.heartbeat_at, now, dead_after, c.scheduler) for c in claims]
        return None if None in reasons else "; ".join(r for r in reasons if r)

    def shards(self, run_id: str) -> list[StoredShard]:
        """Every shard claim recorded for the run, by shard index: status, owner, last beat, scheduler,
        and what its process did (None until it is done)."""
        with self._session() as s:
            rows = s.scalars(select(RunShard).where(RunShard.run_id == run_id).order_by(RunShard.shard))
            return [
                StoredShard(r.shards, r.shard, ShardStatus(r.status), r.owner, r.heartbeat_at, r.scheduler,
                            ShardWork.from_json(json.loads(r.work_json)) if r.work_json else None)
                for r in rows
            ]  # fmt: skip

    def work(self, run_id: str, shards: int) -> ShardWork:
        """What the processes of the run's `shards` shards did, summed (those that recorded it)."""
        return sum((c.work for c in self.shards(run_id) if c.work and c.shards == shards), ShardWork.none())

    def unfinished(
        self,
        identity: str,
        statuses: Iterable[str] = UNFINISHED,
        batching: Batched | None = None,
        role: RunRole = RunRole.EVALUATION,
    ) -> StoredRun | None:
        """The run this identity would resume, if any (or the newest in `statuses`), at `batching`,
        of those a run of `role` may take (`rows.taken_by`)."""
        with self._session() as s:
            query = select(Run).where(Run.identity == identity, Run.status.in_(tuple(statuses)))
            query = query.where(*taken_by(role))
            row = next((r for r in s.scalars(newest(query, batching)) if batched_as(r, batching)), None)
            return stored(row) if row is not None else None

    def committed_by_subject(self, run_id: str) -> dict[str, tuple[int, int]]:
        """Questions committed and how many of them correct, per subject (one aggregate query)."""
        query = (
            select(QuestionRow.subject, func.count(), func.sum(case((QuestionRow.correct, 1), else_=0)))
            .where(QuestionRow.run_id == run_id)
            .group_by(QuestionRow.subject)
        )
        with self._session() as s:
            return {subject: (int(n), int(k or 0)) for subject, n, k in s.execute(query)}

    def n_committed(self, run_id: str) -> int:
        """How many of the run's questions are committed (0 for an unknown run)."""
        with self._session() as s:
            query = select(func.count()).select_from(QuestionRow).where(QuestionRow.run_id == run_id)
            return int(s.scalar(query) or 0)

    def end_shard(
        self, run_id: str, shard: Shard, status: ShardStatus, work: ShardWork | None = None
    ) -> None:
        """This shard is `done` (its units committed; `work`: what its process did) or `failed`."""
        with self._session(write=True) as s:
            if claim := s.get(RunShard, (run_id, shard.count, shard.index)):
                claim.status = status
                if work is not None:
                    claim.work_json = json.dumps(work.to_json())

    def claim_finalization(self, run_id: str, n_questions: int) -> bool:
        """True for exactly one caller, once every question is committed: that caller finalizes.

        Race-free: the status moves from running/failed to finalizing in one conditional UPDATE; a
        concurrent caller's UPDATE matches no row. Each caller calls this after its own last commit,
        so the last shard to commit always sees every question.
        """
        with self._session(write=True) as s:
            committed = s.scalar(
                select(func.count()).select_from(QuestionRow).where(QuestionRow.run_id == run_id)
            )
            if (committed or 0) < n_questions:
                return False
            claimed = s.execute(
                update(Run)
                .where(Run.id == run_id, Run.status.in_((RunStatus.RUNNING, RunStatus.FAILED)))
                .values(status=RunStatus.FINALIZING, owner=str(current_owner()), heartbeat_at=utc_now())
            )
            return bool(claimed.rowcount == 1)  # type: ignore[attr-defined]

    def finish(self, record: RunRecord, output_dir: str | None = None) -> None:
        """The run is finished: its record, its subjects' scores, every shard done."""
        with self._session(write=True) as s:
            run = s.get_one(Run, record.run_id)
            run.status = RunStatus.FINISHED
            if output_dir is not None:
                run.output_dir = output_dir
            run.finished_at = utc_now()
            run.record_json = json.dumps(record.to_json())
            run.acc_micro = record.scores.micro.acc
            run.acc_macro = record.scores.macro.acc
            s.execute(delete(SubjectScore).where(SubjectScore.run_id == record.run_id))
            s.add_all(
                SubjectScore(
                    run_id=record.run_id, subject=name, n=a.n, correct=a.correct, acc=a.acc, stderr=a.stderr
                )
                for name, a in record.scores.subjects.items()
            )
            s.execute(
                update(RunShard).where(RunShard.run_id == record.run_id).values(status=ShardStatus.DONE)
            )

    def mark(self, run_id: str, status: RunStatus) -> None:
        """The whole run's status (`failed`: every shard of it too, so any process resumes it)."""
        with self._session(write=True) as s:
            s.get_one(Run, run_id).status = status
            if status == RunStatus.FAILED:
                s.execute(update(RunShard).where(RunShard.run_id == run_id).values(status=ShardStatus.FAILED))

    def stop(self, run_id: str, info: EarlyStop) -> None:
        """The sequential gate stopped the run: `stopped` (resumable; never a finished baseline)."""
        with self._session(write=True) as s:
            run = s.get_one(Run, run_id)
            run.status, run.stop_json = RunStatus.STOPPED, json.dumps(info.to_json())
            s.execute(update(RunShard).where(RunShard.run_id == run_id).values(status=ShardStatus.DONE))

    def first_mlflow_run(self, run_id: str, mlflow_run_id: str) -> str:
        """Record `mlflow_run_id` as the run's MLflow run unless one is already recorded (shards
        opening theirs at once): the one recorded, which every shard then logs to."""
        with self._session(write=True) as s:
            s.execute(
                update(Run)
                .where(Run.id == run_id, Run.mlflow_run_id.is_(None))
                .values(mlflow_run_id=mlflow_run_id)
            )
        with self._session() as s:
            return s.get_one(Run, run_id).mlflow_run_id or mlflow_run_id

    def set_mlflow_run(self, run_id: str, mlflow_run_id: str, *, synced: bool) -> None:
        """The MLflow run this run logs to; `synced` once everything is logged there."""
        with self._session(write=True) as s:
            run = s.get_one(Run, run_id)
            run.mlflow_run_id = mlflow_run_id
            run.mlflow_synced_at = utc_now() if synced else None

    def runs(self, limit: int = 50, unsynced: bool = False, noise: bool = True) -> list[StoredRun]:
        """At most `limit` runs, newest first; `unsynced`: only finished runs not completely logged to
        MLflow yet (`runs sync`); `noise=False`: the noise command's runs left out."""
        query = select(Run).order_by(Run.created_at.desc()).limit(limit)
        query = query.where(*with_noise(noise))
        if unsynced:
            query = query.where(Run.status == RunStatus.FINISHED, Run.mlflow_synced_at.is_(None))
        with self._session() as s:
            return [stored(r) for r in s.scalars(query)]

    def find(self, ref: str) -> list[StoredRun]:
        """Runs that `ref` names: its id, its MLflow run id, or every run whose id starts with it."""
        with self._session() as s:
            run = s.get(Run, ref) or s.scalars(select(Run).where(Run.mlflow_run_id == ref)).first()
            if run is not None:
                return [stored(run)]
            query = select(Run).where(Run.id.startswith(ref, autoescape=True)).order_by(Run.created_at.desc())
            if ref and all(ch in "0123456789abcdef" for ch in ref):  # SQLite's LIKE ... ESCAPE uses no index:
                query = query.where(Run.id >= ref, Run.id < ref[:-1] + chr(ord(ref[-1]) + 1))  # a key range
            return [stored(r) for r in s.scalars(query.limit(20))]

    def get(self, run_id: str) -> StoredRun | None:
        """A run by id, by a unique prefix of it, or by its MLflow run id."""
        found = self.find(run_id)
        return found[0] if len(found) == 1 else None

    def question_results(self, run_id: str, subject: str | None = None) -> list[QuestionResult]:
        """The run's committed questions (of `subject`, when given), by subject and index; [] for an
        unknown run."""
        with self._session() as s:
            where = [QuestionRow.run_id == run_id] + ([QuestionRow.subject == subject] if subject else [])
            order = (QuestionRow.subject, QuestionRow.question_index)
            rows = s.connection().execute(select(*COLUMNS).where(*where).order_by(*order))  # no ORM loading
            return [from_columns(r) for r in rows]

    def finished_runs(self, model_name: str, noise: bool = False) -> list[StoredRun]:
        """A model's finished runs, newest first (the gate picks a comparable one among them): its
        evaluations, and with `noise` the noise command's runs too."""
        query = select(Run).where(Run.model_name == model_name, Run.status == RunStatus.FINISHED)
        query = query.where(*with_noise(noise))
        with self._session() as s:
            return [stored(r) for r in s.scalars(query.order_by(Run.created_at.desc()))]
