"""Where a run goes as it is evaluated: its folder and files, its live MLflow run, and the signal
that stops it. The pipeline calls these; they hold no evaluation logic.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.records.run import RunRecord

if TYPE_CHECKING:
    pass

RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.jsonl"
EARLY_STOP_FILE = "early_stop.json"  # a run the sequential gate stopped: why, and what it used
CLAIM_FILE = ".mmlu_track_run"  # the id of the run that took the folder (`own_folder`)


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Write `obj` to `path` as indented UTF-8 JSON, atomically: a reader sees the old file or the
    whole new one, never half of it."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # never a half-written results.json


def own_folder(output_dir: Path, run_id: str) -> Path:
    """`output_dir` when it holds no other run's files, else its subfolder `run-<id>`. A run takes
    a folder by creating `CLAIM_FILE` there exclusively (its id inside): of two runs finishing into
    one folder at once, one gets it (a check for results.json alone let both in, and the second's
    results replaced the first's)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    if _taken_by(output_dir, run_id) == run_id:
        return output_dir
    own = output_dir / f"run-{run_id[:12]}"  # named by this run: no other run takes it
    own.mkdir(exist_ok=True)
    return own


def _taken_by(folder: Path, run_id: str) -> str | None:
    """Whose folder this is: the run its results.json names, else the run whose claim is there
    (`run_id`'s own, created here, when the folder was free); None where what is there cannot be
    read (never written over)."""
    results = folder / RESULTS_FILE
    if results.is_file():  # a folder written before claims existed, or resumed: its results say
        try:
            doc = json.loads(results.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return str(doc["run_id"]) if isinstance(doc, dict) and "run_id" in doc else None
    claim = folder / CLAIM_FILE
    try:
        with claim.open("x", encoding="utf-8") as f:
            f.write(run_id)
        return run_id
    except FileExistsError:
        try:  # another run's claim, or this run's own (a resume); empty while its writer is mid-write
            return claim.read_text(encoding="utf-8") or None
        except OSError:
            return None


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM (a scheduler's stop, `kill`) unwinds like Ctrl-C, so the run is marked and its MLflow
    run ends KILLED; only where nobody else (a launcher) handles SIGTERM already, or where submitit
    only logs it: under submitit `scancel` left a shard at work until SLURM's SIGKILL 30 s later.
    (submitit requeues on its own signal, USR2, sent before a time limit or a preemption; units
    are committed as they end, so stopping at SIGTERM loses nothing the requeued job needs)."""
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


def abandoned_line(record: RunRecord) -> str | None:
    """What a slow server cost, when it cost something: requests cut at the deadline and retried."""
    t = record.timing
    if not t.abandoned_requests:
        return None
    return (
        f"{t.abandoned_requests} of {t.requests} requests got no complete answer within model.timeout_s and "
        f"were asked again ({t.abandoned_s:.1f} s waited on them; in results.json's timing)"
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
