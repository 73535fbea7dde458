"""Where a run goes as it is evaluated: its folder and files, its live MLflow run, and the signal
that stops it. The pipeline calls these; they hold no evaluation logic.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.config import EvalConfig
from mmlu_track.console import warn
from mmlu_track.records.results import Docs, QuestionResult, Scores
from mmlu_track.records.run import RunRecord, RunStart, Timing
from mmlu_track.records.stored import ShardWork
from mmlu_track.store.db import StoreError
from mmlu_track.store.sql import SqlStore

if TYPE_CHECKING:
    from mmlu_track.store.mlflow import LiveRun

RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.jsonl"
EARLY_STOP_FILE = "early_stop.json"  # a run the sequential gate stopped: why, and what it used


def write_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # never a half-written results.json


def own_folder(output_dir: Path, run_id: str) -> Path:
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
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM (a scheduler's stop, `kill`) unwinds like Ctrl-C, so the run is marked and its MLflow
    run ends KILLED; only where nobody else (a launcher) handles SIGTERM already, or where submitit
    only logs it: under submitit `scancel` left a shard at work until SLURM's SIGKILL 30 s later.
    (submitit requeues on its own signal, USR2, sent before a time limit or a preemption; units
    are committed as they end, so stopping at SIGTERM loses nothing the requeued job needs.)"""
    current = signal.getsignal(signal.SIGTERM)
    submitit_bypass = type(getattr(current, "__self__", None)).__module__.startswith("submitit.")
    if threading.current_thread() is not threading.main_thread() or (
        current is not signal.SIG_DFL and not submitit_bypass
    ):
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, current)


def open_mlflow(cfg: EvalConfig, store: SqlStore, run_id: str, start: RunStart) -> LiveRun | None:
    """The run's live MLflow run (the same one when resuming, and for every shard of a sharded run:
    the first shard to open one records it, a shard that opened another at the same moment deletes
    its own and joins), or None when tracking.mlflow=false."""
    if not cfg.tracking.mlflow:
        return None
    from mmlu_track.store.mlflow import LiveRun

    live = LiveRun(cfg.tracking.mlflow_uri, cfg.tracking.experiment, warn)
    stored = store.get(run_id)
    if stored is None:
        raise StoreError(f"run {run_id} was deleted from {store.url} while this process evaluated it")
    started = stored.created_at.replace(tzinfo=UTC)  # the run's start, whichever process opens it
    mlflow_id = live.open(run_id, start, stored.mlflow_run_id, started=started)
    if mlflow_id is None or mlflow_id == stored.mlflow_run_id:
        return live
    if stored.mlflow_run_id is not None:  # the recorded one is gone (another server): this one now
        store.set_mlflow_run(run_id, mlflow_id, synced=False)
    elif (first := store.first_mlflow_run(run_id, mlflow_id)) != mlflow_id:
        live.join(first)
    return live


def finish_mlflow(
    cfg: EvalConfig,
    store: SqlStore,
    record: RunRecord,
    results: Sequence[QuestionResult],
    live: LiveRun | None,
    *,
    docs: Docs | None = None,
) -> str | None:
    """Complete the live MLflow run; if MLflow failed on the way, one more try in one go (it may be
    back), else a warning naming the `runs sync` command. The SQL run is finished either way."""
    if live is None:
        return None
    # `finish` is True only for a run it opened: one with an id.
    if live.finish(record, results, docs) and (mlflow_id := live.id) is not None:
        store.set_mlflow_run(record.run_id, mlflow_id, synced=True)
        return mlflow_id
    from mmlu_track.store.mlflow_sync import sync

    t = cfg.tracking
    return sync(
        store, record, results, uri=t.mlflow_uri, experiment=t.experiment, existing=live.id, warn=warn
    )


def run_record(
    start: RunStart,
    run_id: str,
    results: list[QuestionResult],
    agg: Scores,
    *,
    truncated: int,
    work: ShardWork,
    done: dict[str, list[QuestionResult]],
    started: float,
) -> RunRecord:
    """The finished run's record: `results` are all of its questions, `work` what this process did
    (a sharded run: all its shards, summed)."""
    return RunRecord(
        run_id=run_id,
        start=start,
        shots_used=dict(Counter(r.shots_used for r in results)),
        truncated=truncated,
        multi_pass=work.multi_pass,
        prefix_fallbacks=work.prefix_fallbacks,
        timing=Timing(
            data_s=round(work.data_s, 3),
            model_load_s=round(work.model_load_s, 3),
            scoring_s=round(work.scoring_s, 3),
            questions_per_s=round(work.scored / max(work.scoring_s, 1e-9), 3),
            resumed_subjects=len({r.subject for rs in done.values() for r in rs}),
            tokens_forwarded=work.forwarded,
            total_s=round(max(work.total_s, time.time() - started), 3),
        ),
        scores=agg,
    )


def summary_line(
    record: RunRecord, n_results: int, scored_now: int, seconds: float, *, sharded: bool, output_dir: Path
) -> str:
    """The finalizing process's last line: how many questions it scored, how fast, and where they are."""
    scored = f"{n_results} questions" if n_results == scored_now else f"{scored_now} questions scored now"
    others = n_results - scored_now
    where = "committed before or by other shards" if sharded else "resumed from the store"
    return (
        f"{scored} in {seconds:.1f} s ({scored_now / max(seconds, 1e-9):.2f} q/s)"
        f"{f', {others} {where}' if others else ''}; results in {output_dir}; "
        f"run {record.run_id}"
    )
