"""One evaluation, stage by stage: config -> plan (data, prompts) -> scoring -> results -> stores.

No Hydra here: `run` takes a validated `EvalConfig` and the folder to write into. It prepares the
run (`prepare.prepare`: plan, model, prompts, identity), makes its `RunRecorder` (the SQL store
and MLflow) and hands both to an `EvaluationSession` (`session.py`), which claims the run, scores
this process's shard of it unit by unit, committing each, and finalizes it if this process commits
the last unit. An unfinished run with the same identity is resumed (the same SQL run and MLflow
run), so a killed evaluation loses at most the unit in progress.

With `looks` (the sequential gate, `gate/sequential_run.py`), the run is scored in looks instead
(`plan.looks`: each subject's questions in a seeded order, a part of every subject per look); after
each committed look the gate may stop the evaluation: the run is then `stopped` (an `EarlyStop`),
and the same command without the gate resumes it to completion.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mmlu_track.eval.plan import TruncationError, plan
from mmlu_track.pipeline.outputs import sigterm_as_exit
from mmlu_track.pipeline.prepare import Origin, prepare
from mmlu_track.pipeline.resolve import resolve
from mmlu_track.pipeline.reuse import finished_twin, reused_line
from mmlu_track.pipeline.session import QUIET, Display, Echo, EvaluationSession, Looks, RunOutput
from mmlu_track.records.results import QuestionResult
from mmlu_track.records.stored import StoredRun
from mmlu_track.settings.config import EvalConfig
from mmlu_track.store.liveness import Shard
from mmlu_track.store.recorder import RunRecorder, StoreOnDemand
from mmlu_track.store.sql import SqlStore
from mmlu_track.support.errors import MmluTrackError

__all__ = ["QUIET", "Display", "Echo", "Looks", "Origin", "RunOutput", "TruncationError", "run"]


def _kept(
    cfg: EvalConfig, origin: Origin, looks: Looks | None, recorder: RunRecorder, identity: str
) -> tuple[StoredRun, list[QuestionResult]] | None:
    """The finished run of this identity taken as the result (`Origin.reuse`; by default, unless
    tracking.rerun, tracking.resume=false, the sequential gate, which scores its own looks, or an
    unfinished run of the identity, which resumes)."""
    if origin.reuse is not None:
        return recorder.finished(identity) if origin.reuse else None
    if not cfg.tracking.resume or cfg.tracking.rerun or looks is not None:
        return None
    if recorder.store.unfinished(identity) is not None:
        return None
    return recorder.finished(identity)


def _reused(stored: StoredRun, recorder: RunRecorder, output_dir: Path) -> RunOutput:
    """A finished run taken as it is: nothing scored, nothing recorded."""
    record = stored.record
    where = Path(stored.output_dir) if stored.output_dir else output_dir
    results = recorder.store.question_results(stored.id)
    scores = record.scores if record is not None else None
    return RunOutput(stored.id, results, scores, record, where, stored.mlflow_run_id, reused=True)


@contextmanager
def _before_any_work() -> Iterator[None]:
    """A refusal here (the store, the model, the prompts) comes before the run is claimed: nothing
    of it is recorded, and the command leaves no output folder."""
    try:
        yield
    except (MmluTrackError, KeyboardInterrupt) as err:  # Ctrl-C while the model loads: nothing recorded
        err.before_any_work = True  # type: ignore[union-attr]
        raise


def run(
    cfg: EvalConfig,
    output_dir: Path,
    *,
    display: Display = Display(),  # noqa: B008 -- frozen
    looks: Looks | None = None,
    origin: Origin | None = None,
    store: SqlStore | StoreOnDemand | None = None,
) -> RunOutput:
    """Evaluate `cfg.model` (this process's shard of it), record the run in the SQL store and MLflow,
    write files to `output_dir`; in `looks` when given (unsharded only). `origin`: the sweep this
    process is a job of, the command line it records (default: this process's own) and whether a
    finished run of the same identity is taken from the store as it is, nothing scored. `store`: the
    command's own SQL store when it holds one (the sequential gate's, with `looks`; else the run
    opens and closes its own). `cfg` stays as asked: the choices made from it are `origin.resolved`,
    made as the command started (`pipeline.resolve`), or here, once, when the caller made none."""
    store = store or (looks.store if looks is not None else None)
    origin = origin or Origin()
    resolved = origin.resolved or resolve(cfg, origin.host_share)
    batching = (cfg.batch_size, cfg.batch_tokens) if origin.own_batching else None
    with _before_any_work():
        shard, uri = Shard(cfg.shard, cfg.shards), resolved.mlflow_uri
        recorder = RunRecorder(cfg.tracking, shard, store, batching, origin.label, uri)
        recorder.role = origin.role
    try:
        with sigterm_as_exit():
            with _before_any_work():
                planned = plan(cfg)
                ours = origin.reuse is None and cfg.tracking.resume  # the command's default
                twin = finished_twin(cfg, planned, recorder, stopped=looks is not None) if ours else None
                rerun = twin is not None and cfg.tracking.rerun  # scored again on purpose, gated or not
                if twin and looks and (cfg.tracking.rerun or not looks.recorded(twin)):
                    twin = None  # gated, and no verdict on it to take back: scored and gated as before
            if twin is not None and not cfg.tracking.rerun:  # the same command again, the model never loaded
                display.echo(reused_line(twin))
                return _reused(twin, recorder, output_dir)
            if rerun:  # scored again on purpose: told apart from the first in MLflow's list
                recorder.label = origin.label or "rerun"
            with _before_any_work():
                prep = prepare(cfg, origin, resolved, planned)
            kept = _kept(cfg, origin, looks, recorder, prep.identity)
            if kept is not None:  # weights pinned only once loaded (a hub branch), or the noise command's
                prep.lm.close()
                if origin.reuse is None:
                    display.echo(reused_line(kept[0]))
                return _reused(kept[0], recorder, output_dir)
            try:
                return EvaluationSession(cfg, prep, recorder, output_dir, display=display, looks=looks).run()
            finally:
                prep.lm.close()
    finally:
        recorder.close()
