"""One evaluation, stage by stage: config -> plan (data, prompts) -> scoring -> results -> stores.

No Hydra here: `run` takes a validated `EvalConfig` and the folder to write into. Each subject is
committed to the SQL store as soon as it is scored, and its accuracy goes to the run's live MLflow
run; an unfinished run with the same identity is resumed (the same SQL run and MLflow run), so a
killed evaluation loses at most the subject in progress. The finished run is one typed
`RunRecord`: results.json, the SQL store and MLflow all get that record.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mmlu_track.config import EvalConfig, to_dict
from mmlu_track.eval import models, prompts, provenance
from mmlu_track.eval.plan import Plan, TruncationError, fits_check, identity, plan, render
from mmlu_track.eval.results import Accuracy, QuestionResult, Scores, aggregate, table, write_jsonl
from mmlu_track.eval.scoring import SCORERS, Score, calibrate
from mmlu_track.store.record import DataInfo, HostInfo, RunRecord, RunStart, Timing

if TYPE_CHECKING:
    from mmlu_track.store.mlflow import LiveRun
    from mmlu_track.store.sql import RunMeta, SqlStore

__all__ = ["RunOutput", "TruncationError", "run"]

RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.jsonl"
Echo = Callable[[str], None]


@dataclass(frozen=True)
class RunOutput:
    run_id: str
    results: list[QuestionResult]
    scores: Scores
    record: RunRecord
    output_dir: Path
    mlflow_run_id: str | None


def warn(message: str) -> None:
    print(f"mmlu_track: warning: {message}", file=sys.stderr)


def _to_results(
    batch: Sequence[prompts.Prompt], scores: Sequence[Score], calibration: str
) -> list[QuestionResult]:
    predictions: list[int | None] = [s.prediction for s in scores]
    margins: list[float | None] = [None] * len(scores)
    if scores and scores[0].logprobs is not None:
        matrix = calibrate(np.array([s.logprobs for s in scores], dtype=np.float64), calibration)
        predictions = [int(p) for p in np.argmax(matrix, axis=1)]
        top2 = np.sort(matrix, axis=1)[:, -2:]
        margins = [float(m) for m in top2[:, 1] - top2[:, 0]]
    return [
        QuestionResult(
            subject=p.question.subject,
            index=p.question.index,
            prompt_hash=p.sha,
            shots_used=p.shots_used,
            n_tokens=s.n_tokens,
            truncated=s.truncated,
            logprobs=s.logprobs,
            generated=s.generated,
            prediction=pred,
            gold=p.question.answer,
            margin=margin,
        )
        for p, s, pred, margin in zip(batch, scores, predictions, margins, strict=True)
    ]


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # never a half-written results.json


def _own_folder(output_dir: Path, run_id: str) -> Path:
    """`output_dir`, or a subfolder of it when another run's results are already there."""
    output_dir.mkdir(parents=True, exist_ok=True)
    existing = output_dir / RESULTS_FILE
    if existing.is_file():
        try:
            other = json.loads(existing.read_text(encoding="utf-8")).get("run_id")
        except (OSError, ValueError):
            other = None
        if other != run_id:
            output_dir = output_dir / f"run-{run_id[:12]}"
            output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM (a scheduler's stop, `kill`) unwinds like Ctrl-C, so the run is marked and its MLflow
    run ends KILLED; only where nobody else (a launcher) handles SIGTERM already."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run(
    cfg: EvalConfig,
    output_dir: Path,
    *,
    progress: bool = True,
    echo: Echo = print,
    sweep: str | None = None,
) -> RunOutput:
    """Evaluate `cfg.model`, record the run in the SQL store and MLflow, write files to `output_dir`."""
    from mmlu_track.store.sql import SqlStore

    store = SqlStore(cfg.tracking.db_url)  # fail before any work when the database is unusable
    try:
        with _sigterm_as_exit():
            return _run(cfg, output_dir, store, progress=progress, echo=echo, sweep=sweep)
    finally:
        store.close()


@dataclass(frozen=True)
class _Prepared:
    lm: models.LoadedModel
    plan: Plan
    rendered: dict[str, list[prompts.Prompt]]
    start: RunStart
    identity: str
    data_s: float
    model_load_s: float


def _prepare(cfg: EvalConfig, sweep: str | None) -> _Prepared:
    """Everything before the run is recorded; refuses prompts that can never fit."""
    t0 = time.time()
    seeds = provenance.set_seeds(cfg.seed)
    the_plan = plan(cfg)
    t1 = time.time()
    lm = models.load(cfg)
    t2 = time.time()
    fits = fits_check(lm, cfg.scoring.max_new_tokens if cfg.scoring.method == "generate" else 1)
    rendered = render(cfg, the_plan, lm, fits)
    first = the_plan.all_questions[0]
    host = provenance.host()
    start = RunStart(
        config=cfg,
        model=lm.info,
        data=DataInfo(
            source=cfg.data.source,
            path=cfg.data.path,
            fingerprint=the_plan.fingerprint,
            dev_fingerprint=the_plan.dev_fingerprint,
            n_questions=len(the_plan.all_questions),
        ),
        template_hash=prompts.template_hash(cfg.formulation),
        example_prompt=rendered[first.subject][0].text,
        seeds=seeds,
        versions=provenance.versions(),
        git_commit=provenance.git_commit(),
        host=HostInfo(host["hostname"], host["platform"], tuple(host["argv"])),
        sweep=sweep,
    )
    ident = identity(cfg, lm.info, the_plan.fingerprint)
    if not cfg.tracking.resume:  # a fresh identity of the same length (the column holds 64 characters)
        ident = hashlib.sha256(f"{ident}-{time.time_ns()}".encode()).hexdigest()
    return _Prepared(lm, the_plan, rendered, start, ident, t1 - t0, t2 - t1)


def _meta(prep: _Prepared, output_dir: Path) -> RunMeta:
    """The SQL store's columns of the run, to find it again (resume) and to select it (the gate)."""
    from mmlu_track.store.sql import RunMeta

    start, cfg = prep.start, prep.start.config
    return RunMeta(
        identity=prep.identity,
        model_name=start.model.name,
        model_revision=start.model.revision or start.model.weights_sha256,
        scoring=cfg.scoring.method,
        formulation=cfg.formulation,
        k=cfg.k,
        data_fingerprint=start.data.fingerprint,
        template_hash=start.template_hash,
        git_commit=start.git_commit,
        config=to_dict(cfg),
        n_questions=start.data.n_questions,
        output_dir=str(output_dir),
        sweep=start.sweep,
    )


def _open_mlflow(cfg: EvalConfig, store: SqlStore, run_id: str, start: RunStart) -> LiveRun | None:
    """The run's live MLflow run (the same one when resuming), or None when tracking.mlflow=false."""
    if not cfg.tracking.mlflow:
        return None
    from mmlu_track.store.mlflow import LiveRun

    live = LiveRun(cfg.tracking.mlflow_uri, cfg.tracking.experiment, warn)
    stored = store.get(run_id)
    if live.open(run_id, start, stored.mlflow_run_id if stored else None):
        assert live.id is not None
        store.set_mlflow_run(run_id, live.id, synced=False)
    return live


@dataclass
class _Counts:
    multi_pass: int = 0
    prefix_fallbacks: int = 0
    forwarded: int = 0


def _score(
    cfg: EvalConfig,
    prep: _Prepared,
    store: SqlStore,
    run_id: str,
    *,
    done: dict[str, list[QuestionResult]],
    live: LiveRun | None,
    progress: bool,
) -> tuple[list[QuestionResult], _Counts]:
    """Score each subject not yet committed; commit it, and log it to the live MLflow run."""
    from tqdm import tqdm

    scorer = SCORERS[cfg.scoring.method]
    counts = _Counts()
    results: list[QuestionResult] = []
    total = len(prep.plan.all_questions)
    with tqdm(total=total, desc="MMLU", unit="q", disable=not progress, file=sys.stderr) as bar:
        for subject, qs in prep.plan.questions.items():
            if len(done.get(subject, ())) == len(qs):
                results.extend(done[subject])
                bar.update(len(qs))
                continue
            bar.set_postfix_str(subject)
            rendered = prep.rendered[subject]
            scores = scorer(
                prep.lm,
                [p.text for p in rendered],
                cfg.scoring,
                cfg.batch_size,
                bar.update,
                prefixes=[p.prefix for p in rendered],
                max_tokens=cfg.batch_tokens,
            )
            counts.multi_pass += sum(s.multi_pass for s in scores)
            counts.prefix_fallbacks += sum(s.prefix_fallback for s in scores)
            counts.forwarded += sum(s.forwarded for s in scores)
            subject_results = _to_results(rendered, scores, cfg.scoring.calibration)
            store.save_subject(run_id, subject, subject_results)
            results.extend(subject_results)
            if live is not None:
                acc = Accuracy.of([r.correct for r in subject_results])
                so_far = Accuracy.of([r.correct for r in results])
                live.subject_done(subject, acc, len({r.subject for r in results}), so_far)
    return results, counts


def _run(
    cfg: EvalConfig, output_dir: Path, store: SqlStore, *, progress: bool, echo: Echo, sweep: str | None
) -> RunOutput:
    from mmlu_track.store.sql import StoreError

    started = time.time()
    prep = _prepare(cfg, sweep)
    start = prep.start
    run_id, done = store.start_or_resume(_meta(prep, output_dir))
    if done:
        left = len(prep.plan.questions) - len(done)
        echo(f"resuming run {run_id}: {len(done)} subjects already done, {left} to go")
    live = _open_mlflow(cfg, store, run_id, start)
    scoring_started = time.time()
    try:
        results, counts = _score(cfg, prep, store, run_id, done=done, live=live, progress=progress)
    except BaseException as err:
        with contextlib.suppress(StoreError):  # the database itself may be what failed
            store.mark(run_id, "failed")  # still resumable: its committed subjects are kept
        if live is not None:
            live.end("KILLED" if isinstance(err, KeyboardInterrupt | SystemExit) else "FAILED")
        if isinstance(err, StoreError):
            raise StoreError(
                f"{err}; the subjects committed so far are kept: run the same command to resume"
            ) from err
        raise
    finished = time.time()
    if truncated := sum(r.truncated for r in results):
        echo(f"warning: {truncated} prompts were truncated to their last tokens (allow_truncation=true)")

    resumed = sum(map(len, done.values()))
    scored_now = len(results) - resumed
    agg = aggregate(results)
    record = RunRecord(
        run_id=run_id,
        start=start,
        shots_used=dict(Counter(r.shots_used for r in results)),
        truncated=truncated,
        multi_pass=counts.multi_pass,
        prefix_fallbacks=counts.prefix_fallbacks,
        timing=Timing(
            data_s=round(prep.data_s, 3),
            model_load_s=round(prep.model_load_s, 3),
            scoring_s=round(finished - scoring_started, 3),
            questions_per_s=round(scored_now / max(finished - scoring_started, 1e-9), 3),
            resumed_subjects=len(done),
            tokens_forwarded=counts.forwarded,
            total_s=round(time.time() - started, 3),
        ),
        scores=agg,
    )
    output_dir = _own_folder(output_dir, run_id)
    write_jsonl(output_dir / PREDICTIONS_FILE, results)
    _write_json(output_dir / RESULTS_FILE, record.to_json())
    store.finish(record, str(output_dir))
    echo(table(agg))
    scored = f"{len(results)} questions" if not resumed else f"{scored_now} questions scored now"
    echo(
        f"{scored} in {finished - scoring_started:.1f} s ({record.timing.questions_per_s:.2f} q/s)"
        f"{f', {resumed} resumed from the store' if resumed else ''}; results in {output_dir}; run {run_id}"
    )
    mlflow_id = _finish_mlflow(cfg, store, record, results, live)
    if mlflow_id:
        echo(f"MLflow run {mlflow_id} (experiment {cfg.tracking.experiment!r})")
    return RunOutput(run_id, results, agg, record, output_dir, mlflow_id)


def _finish_mlflow(
    cfg: EvalConfig,
    store: SqlStore,
    record: RunRecord,
    results: Sequence[QuestionResult],
    live: LiveRun | None,
) -> str | None:
    """Complete the live MLflow run; if MLflow failed on the way, one more try in one go (it may be
    back), else a warning naming the `runs sync` command. The SQL run is finished either way."""
    if live is None:
        return None
    if live.finish(record, results):
        assert live.id is not None
        store.set_mlflow_run(record.run_id, live.id, synced=True)
        return live.id
    from mmlu_track.store.mlflow import sync

    t = cfg.tracking
    return sync(
        store, record, results, uri=t.mlflow_uri, experiment=t.experiment, existing=live.id, warn=warn
    )
