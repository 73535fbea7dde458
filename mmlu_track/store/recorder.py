"""The run recorder: the only object an evaluation talks to about persistence.

It owns the SQL store (the source of truth) and the run's MLflow run (a mirror kept in step), for
one process's shard of one run:

- `claim(start, identity, output_dir)`: start the run or resume the newest unfinished one with its
  identity (atomic, `SqlStore.start_or_resume`), taking this process's shard; its committed
  questions back. `beating()`: the heartbeat that tells other processes this one is alive.
- `open_mirror()`: the run's MLflow run, opened from the first shard's start; every shard of a run
  logs to one (the first recorded wins, a shard that opened another at the same moment joins it).
- `commit(results)`: a unit's questions, committed at once (a kill loses at most the unit at work);
  `subject_done(...)`: the run's progress, as each subject finishes, to MLflow.
- `finish(record, output_dir)` then `mirror_finished(record, results, docs)`, `stop(...)`,
  `fail(err)`: the run's three ends.
  `end_shard(work)` and `claim_finalization(n)` decide which process finalizes (exactly one).

MLflow down costs nothing: the SQL store is finished either way, and `runs sync` catches MLflow up.
The MLflow URI is fixed here, once, when the recorder is made (`locations.mlflow_uri`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING

from mmlu_track.records.results import Accuracy, Docs, QuestionResult
from mmlu_track.records.run import EarlyStop, RunRecord, RunRole, RunStart
from mmlu_track.records.stored import RunStatus, ShardStatus, ShardWork, StoredRun
from mmlu_track.settings.config import TrackingConfig
from mmlu_track.store.db import StoreError, check_folder, sqlite_file
from mmlu_track.store.liveness import Heartbeat, Shard
from mmlu_track.store.locations import missing_folder
from mmlu_track.store.mirror import mirrored
from mmlu_track.store.rows import Batched
from mmlu_track.store.sql import SqlStore, open_store
from mmlu_track.support.console import warn
from mmlu_track.support.credentials import redact

if TYPE_CHECKING:
    from mmlu_track.store.mlflow import LiveRun

Done = dict[str, list[QuestionResult]]  # committed questions by subject


class StoreOnDemand:
    """A command's SQL store: opened at once when it exists (an unusable one refused before any
    work), but a SQLite file still to be made only at first use, so that a command refused before
    then leaves no empty store behind. One per command, shared by its evaluations (the noise
    command's): one connection. `opened`: a store the caller holds (and closes) already."""

    def __init__(self, tracking: TrackingConfig, opened: SqlStore | None = None) -> None:
        """`tracking`: the store's settings; `opened`: a store the caller holds (never closed here). An
        existing store is opened now (`StoreError` when unusable); for a SQLite file still to be made,
        only its folder is checked now (it exists and is writable)."""
        self.tracking = tracking
        self._store = opened
        self._owned = opened is None
        new_file = sqlite_file(tracking.db_url) if opened is None else None
        if new_file is not None and not new_file.exists():
            check_folder(new_file, new=True)  # its folder exists and is writable: refused now, not later
        elif opened is None:
            self._store = open_store(tracking)

    def get(self) -> SqlStore:
        """The SQL store, opened (a new SQLite file made) at the first call; the same one after."""
        if self._store is None:
            self._store = open_store(self.tracking)
        return self._store

    def close(self) -> None:
        """Close the store if this object opened it; one the caller passed in stays open."""
        if self._owned and self._store is not None:
            self._store.close()


class RunRecorder:
    """One process's side of one run in the SQL store and MLflow (see the module's docstring)."""

    def __init__(
        self,
        tracking: TrackingConfig,
        shard: Shard | None = None,
        store: SqlStore | StoreOnDemand | None = None,
        batching: Batched | None = None,
        label: str | None = None,
        mlflow_uri: str | None = None,
    ) -> None:
        """`store`: the command's own, when it already holds one (the sequential gate, the noise
        command): one connection per command, closed by whoever opened it. `batching`: take or
        resume only a run scored at this (batch_size, batch_tokens) (`Origin.own_batching`).
        `label`: said before the MLflow run's name (`Origin.label`). `mlflow_uri`: where the run's
        MLflow records go, as resolved when the command started (`settings.resolved`), so that its
        hint and `runs sync` name that server, not whatever MLflow's default is in the shell that
        syncs later; None with tracking.mlflow=false. `role` (set by the evaluation from
        `Origin.role`, as its start record's): it takes only the finished runs `rows.taken_by` allows."""
        self.batching, self.label = batching, label
        self.role = RunRole.EVALUATION
        self.tracking = tracking
        self.mlflow_uri = uri = mlflow_uri if tracking.mlflow else None
        if uri and (why := missing_folder(uri)):  # before any work, not a run finished unmirrored
            raise StoreError(why)
        self.shard = shard or Shard()
        self._owns_store = store is None
        self._store = store if isinstance(store, StoreOnDemand) else StoreOnDemand(self.tracking, store)
        self._run_id: str | None = None
        self._start: RunStart | None = None
        self.live: LiveRun | None = None

    @property
    def store(self) -> SqlStore:
        """The SQL store (a new SQLite file made now, at first use: after the run's model and
        prompts are ready)."""
        return self._store.get()

    def close(self) -> None:
        """Close the SQL store if the recorder made its own; one passed in stays open for its owner."""
        if self._owns_store:
            self._store.close()

    def finished(self, identity: str) -> tuple[StoredRun, list[QuestionResult]] | None:
        """A finished run of `identity` with its questions, taken as it is (`Origin.reuse`)."""
        kept = self.store.unfinished(identity, [RunStatus.FINISHED], self.batching, self.role)
        if kept is None or kept.record is None:
            return None
        return kept, self.store.question_results(kept.id)

    @property
    def run_id(self) -> str:
        """The id of the run `claim` started or resumed; `RuntimeError` before it."""
        if self._run_id is None:
            raise RuntimeError("the recorder has no run yet (a bug: claim comes first)")
        return self._run_id

    @property
    def mirrored(self) -> bool:
        """Whether the run has an MLflow run this process logs to."""
        return self.live is not None

    @property
    def mlflow_id(self) -> str | None:
        """The id of the MLflow run this process logs to; None without one (MLflow off, or none opened)."""
        return self.live.id if self.live is not None else None

    # -- claiming ---------------------------------------------------------------------------------

    def claim(self, start: RunStart, identity: str, output_dir: Path, *, once: bool = False) -> Done:
        """Start or resume the run of `identity`, taking this shard; its committed questions.
        `once`: `RunFinished` where the identity has a finished run (checked in the same transaction)."""
        self._run_id, done = self.store.start_or_resume(
            start, identity, self.shard, str(output_dir), self.batching, once=once
        )
        self._start = start
        return done

    def beating(self) -> Heartbeat:
        """Beats while this process works on the run (`with recorder.beating(): ...`)."""
        run_id = self.run_id
        return Heartbeat(lambda: self.store.beat(run_id, self.shard), self.tracking.heartbeat_s)

    def open_mirror(self) -> None:
        """The run's live MLflow run (the same one when resuming, and for every shard of a sharded
        run), or none when tracking.mlflow=false."""
        if not self.tracking.mlflow or self._start is None:
            return
        from mmlu_track.store.mlflow import LiveRun

        live = LiveRun(self.mlflow_uri, self.tracking.experiment, warn, label=self.label)
        self.live = live
        stored = self.store.get(self.run_id)
        if stored is None:
            raise StoreError(
                f"run {self.run_id} was deleted from {self.store.url} while this process evaluated it"
            )
        started = stored.created_at.replace(tzinfo=UTC)  # the run's start, whichever process opens it
        mlflow_id = live.open(self.run_id, self._start, stored.mlflow_run_id, started=started)
        if mlflow_id is None or mlflow_id == stored.mlflow_run_id:
            return
        if stored.mlflow_run_id is not None:  # the recorded one is gone (another server): this one now
            self.store.set_mlflow_run(self.run_id, mlflow_id, synced=False)
        elif (first := self.store.first_mlflow_run(self.run_id, mlflow_id)) != mlflow_id:
            live.join(first)

    # -- while scoring ----------------------------------------------------------------------------

    def commit(self, results: Sequence[QuestionResult]) -> None:
        """Commit one unit's questions (one subject's) in one transaction, replacing an earlier try's;
        a failure is a `StoreError`."""
        self.store.save_unit(self.run_id, results, self.shard)

    def subject_done(self, subjects_done: int, so_far: Accuracy) -> None:
        """A subject finished: the run's accuracy so far, at step = subjects done, to MLflow."""
        if self.live is not None:
            self.live.subject_done(subjects_done, so_far)

    def committed_by_subject(self) -> dict[str, tuple[int, int]]:
        """(committed, correct) by subject, over every shard of the run."""
        return self.store.committed_by_subject(self.run_id)

    def question_results(self, subject: str | None = None) -> list[QuestionResult]:
        """The run's committed questions, every shard's (of `subject`, when given), by subject and index."""
        return self.store.question_results(self.run_id, subject)

    # -- ending -----------------------------------------------------------------------------------

    def end_shard(self, work: ShardWork) -> None:
        """This process's shard is done, all its units committed; `work`: what its process did."""
        self.store.end_shard(self.run_id, self.shard, ShardStatus.DONE, work)

    def claim_finalization(self, n_questions: int) -> bool:
        """True for exactly one process of the run, once every question is committed."""
        return self.store.claim_finalization(self.run_id, n_questions)

    def work(self) -> ShardWork:
        """What every shard of the run did, summed (each ends before it claims the finalization)."""
        return self.store.work(self.run_id, self.shard.count)

    def finish(self, record: RunRecord, output_dir: Path) -> None:
        """The run is finished in the SQL store (the source of truth): its record and scores."""
        self.store.finish(record, str(output_dir))

    def mirror_finished(self, record: RunRecord, results: Sequence[QuestionResult], docs: Docs) -> str | None:
        """The finished run in MLflow (opened now if it was not): its MLflow id, or None (MLflow
        off, or down: then a warning naming the `runs sync` command that logs it later)."""
        if self.live is None:
            self.open_mirror()
        live = self.live
        if live is None:
            return None
        if live.finish(record, results, docs) and (mlflow_id := live.id) is not None:
            self.store.set_mlflow_run(record.run_id, mlflow_id, synced=True)
            return mlflow_id
        return self._last_try(record, results, docs)

    def _last_try(self, record: RunRecord, results: Sequence[QuestionResult], docs: Docs) -> str | None:
        """MLflow failed on the way: log the finished run in one go (it may be back), else a warning
        naming the command that logs it later. The SQL store has the run either way."""
        from mmlu_track.store.mlflow import log_run

        uri, existing, experiment = self.mlflow_uri, self.mlflow_id, self.tracking.experiment
        target = f" --mlflow-uri '{redact(uri)}'" if uri else ""
        command = f"python -m mmlu_track.runs --db '{redact(self.store.url)}' sync{target}"
        secret = " (with the password in place of ***)" if "***" in command else ""
        return mirrored(
            lambda: log_run(record, results, uri=uri, experiment=experiment, existing=existing, docs=docs),
            lambda mlflow_id: self.store.set_mlflow_run(record.run_id, mlflow_id, synced=True),
            f". The run is saved in the SQL store ({redact(self.store.url)}); log it to MLflow later with: "
            f"{command}{secret}",
        )

    def stop(self, stop: EarlyStop, so_far: Accuracy, files: Sequence[Path]) -> None:
        """The sequential gate stopped the run: `stopped` (resumable), its MLflow run ended with why."""
        self.store.stop(self.run_id, stop)
        if self.live is not None and self._start is not None:
            self.live.stopped(stop, so_far, self._start.name, files=files)

    def fail(self, err: BaseException) -> None:
        """Scoring failed with `err`: this shard (and an unsharded run) failed, still resumable; the
        MLflow run ended. Never raises for the store: the database may be what failed."""
        if self._run_id is None:
            return
        with contextlib.suppress(StoreError):
            self.store.end_shard(self.run_id, self.shard, ShardStatus.FAILED)
            if self.shard.count == 1:
                self.store.mark(self.run_id, RunStatus.FAILED)  # its committed questions are kept
        if self.live is not None and self.shard.count == 1:  # a shard's end is not its run's
            self.live.end("KILLED" if isinstance(err, KeyboardInterrupt | SystemExit) else "FAILED")

    def abandon_finalization(self) -> None:
        """Finalizing stopped short (Ctrl-C, SIGTERM, an error): a run still `finalizing` becomes
        `failed`, resumable, never left in a state no process owns; a run already finished stays
        finished. Never raises for the store."""
        with contextlib.suppress(StoreError):
            # No other process moves a run this one finalizes (`claim_finalization`): read, then mark.
            stored = self.store.get(self.run_id)
            if stored is None or stored.status != RunStatus.FINALIZING:
                return
            self.store.mark(self.run_id, RunStatus.FAILED)
            if self.live is not None:
                self.live.end("KILLED")

    def view_url(self) -> str | None:
        """The address of the run's experiment view in MLflow; None without an open MLflow run."""
        return self.live.view_url() if self.live is not None else None
