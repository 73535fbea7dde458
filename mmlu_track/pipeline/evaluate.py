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

from dataclasses import replace
from pathlib import Path

from mmlu_track.eval.plan import TruncationError
from mmlu_track.pipeline.outputs import sigterm_as_exit
from mmlu_track.pipeline.prepare import Origin, prepare
from mmlu_track.pipeline.session import Display, Echo, EvaluationSession, Looks, RunOutput
from mmlu_track.records.stored import RunStatus
from mmlu_track.settings.config import EvalConfig
from mmlu_track.store.recorder import RunRecorder
from mmlu_track.store.sql import Shard

__all__ = ["Looks", "Origin", "RunOutput", "TruncationError", "run"]


def run(
    cfg: EvalConfig,
    output_dir: Path,
    *,
    progress: bool = True,
    echo: Echo = print,
    looks: Looks | None = None,
    origin: Origin | None = None,
) -> RunOutput:
    """Evaluate `cfg.model` (this process's shard of it), record the run in the SQL store and MLflow,
    write files to `output_dir`; in `looks` when given (unsharded only). `origin`: the sweep this
    process is a job of, the command line it records (default: this process's own) and whether a
    finished run of the same identity is taken from the store as it is, nothing scored."""
    recorder = RunRecorder(cfg.tracking, Shard(cfg.shard, cfg.shards))  # fails before any work
    cfg = replace(cfg, tracking=recorder.tracking)  # the MLflow URI it records, fixed from the start
    try:
        with sigterm_as_exit():
            origin = origin or Origin()
            prep = prepare(cfg, origin)
            kept = recorder.store.unfinished(prep.identity, [RunStatus.FINISHED]) if origin.reuse else None
            if kept is not None and kept.record is not None:  # taken as it is: nothing scored
                prep.lm.close()
                results = recorder.store.question_results(kept.id)
                where = Path(kept.output_dir) if kept.output_dir else output_dir
                return RunOutput(kept.id, results, kept.record.scores, kept.record, where, kept.mlflow_run_id)
            try:
                display = Display(echo, progress)
                return EvaluationSession(cfg, prep, recorder, output_dir, display=display, looks=looks).run()
            finally:
                prep.lm.close()
    finally:
        recorder.close()
