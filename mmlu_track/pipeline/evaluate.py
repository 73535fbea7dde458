"""One evaluation, stage by stage: config -> plan (data, prompts) -> scoring -> results -> stores.

No Hydra here: `run` takes a validated `EvalConfig` and the folder to write into. The run's work is
cut into units (`plan.units`: subjects, big ones in slices); this process scores its shard's units
(`plan.assign`; all of them when unsharded), commits each to the SQL store as soon as it is
scored, and logs each finished subject to the run's live MLflow run. An unfinished run with the
same identity is resumed (the same SQL run and MLflow run), so a killed evaluation loses at most
the unit in progress. The process that commits the run's last unit finalizes it, once: one typed
`RunRecord` that results.json, the SQL store and MLflow all get.

With `looks` (the sequential gate, `gate/sequential_run.py`), the run is scored in looks instead
(`plan.looks`: each subject's questions in a seeded order, a part of every subject per look); after
each committed look `looks.look` may stop the evaluation: the run is then `stopped` (an
`EarlyStop`), and the same command without the gate resumes it to completion. A unit committed in
part (a look's questions) scores only its missing questions when resumed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from mmlu_track.config import EvalConfig
from mmlu_track.eval import load, prompts, provenance
from mmlu_track.eval.plan import (
    TruncationError,
    Unit,
    assign,
    fits_check,
    identity,
    plan,
    render,
    style,
    units,
)
from mmlu_track.eval.plan import looks as plan_looks
from mmlu_track.pipeline.outputs import (
    EARLY_STOP_FILE,
    PREDICTIONS_FILE,
    RESULTS_FILE,
    finish_mlflow,
    open_mlflow,
    own_folder,
    run_record,
    sigterm_as_exit,
    summary_line,
    write_json,
)
from mmlu_track.pipeline.score_units import Counts, Looks, Prepared, acc, score, score_looks
from mmlu_track.records.results import Docs, QuestionResult, Scores, aggregate, table, write_jsonl
from mmlu_track.records.run import DataInfo, EarlyStop, HostInfo, RunRecord, RunStart
from mmlu_track.records.stored import ShardWork
from mmlu_track.store.liveness import Heartbeat
from mmlu_track.store.rows import provisional
from mmlu_track.store.sql import Shard, SqlStore, StoreVanished, open_store

if TYPE_CHECKING:
    from mmlu_track.store.mlflow import LiveRun

__all__ = ["Looks", "RunOutput", "TruncationError", "run"]

Echo = Callable[[str], None]


@dataclass(frozen=True)
class RunOutput:
    run_id: str | None  # None for a shard that had no unit to score (it touched no run)
    results: list[QuestionResult]
    scores: Scores | None  # None for a shard that had no unit to score
    record: RunRecord | None  # None for a shard that did not finalize its run (`results`: its own)
    output_dir: Path
    mlflow_run_id: str | None
    stopped: EarlyStop | None = None  # the sequential gate stopped it (`results`: the questions scored)


def run(
    cfg: EvalConfig,
    output_dir: Path,
    *,
    progress: bool = True,
    echo: Echo = print,
    sweep: str | None = None,
    looks: Looks | None = None,
    command: list[str] | None = None,
) -> RunOutput:
    """Evaluate `cfg.model` (this process's shard of it), record the run in the SQL store and MLflow,
    write files to `output_dir`; in `looks` when given (unsharded only). `command`: the command line
    recorded (default: this process's; a launched job's is the launcher's)."""
    if cfg.tracking.mlflow:
        from mmlu_track.store.mlflow_sync import effective_uri

        # One MLflow URI from the start, recorded with the run: its hint and `runs sync` name that
        # server, not whatever MLflow's default is in the shell that syncs later.
        tracking = replace(cfg.tracking, mlflow_uri=effective_uri(cfg.tracking.mlflow_uri))
        cfg = replace(cfg, tracking=tracking)
    store = open_store(cfg.tracking)  # fail before any work when the database is unusable
    try:
        with sigterm_as_exit():
            return _run(
                cfg,
                output_dir,
                store,
                progress=progress,
                echo=echo,
                sweep=sweep,
                looks=looks,
                command=command,
            )
    finally:
        store.close()


def _prepare(cfg: EvalConfig, sweep: str | None, command: list[str] | None) -> Prepared:
    """Everything before the run is recorded; refuses prompts that can never fit."""
    t0 = time.time()
    seeds = provenance.set_seeds(cfg.seed, torch=load.in_process(cfg))
    the_plan = plan(cfg)
    t1 = time.time()
    lm = load.load(cfg)
    t2 = time.time()
    fits = fits_check(lm, cfg.scoring.max_new_tokens if cfg.scoring.method == "generate" else 1)
    try:
        how = style(cfg, lm)
        rendered = render(cfg, the_plan, lm, fits, how)
    except BaseException:
        lm.close()
        raise
    first = the_plan.all_questions[0]
    host = provenance.host(command)
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
        template_hash=prompts.template_hash(cfg.formulation, how),
        example_prompt=rendered[first.subject][0].text,
        seeds=seeds,
        versions=provenance.versions(),
        git_commit=provenance.git_commit(),
        host=HostInfo(host["hostname"], host["platform"], tuple(host["argv"])),
        sweep=sweep,
    )
    ident = identity(cfg, lm.info, start.protocol, fresh=not cfg.tracking.resume)
    return Prepared(lm, the_plan, rendered, start, ident, t1 - t0, t2 - t1, how.answer_lead)


def _all_results(prep: Prepared, store: SqlStore, run_id: str) -> list[QuestionResult]:
    """Every committed question of the run, in plan order (the finalizing shard's view)."""
    by_key = {(r.subject, r.index): r for r in store.question_results(run_id)}
    return [by_key[(q.subject, q.index)] for q in prep.plan.all_questions]


def _stopped(
    store: SqlStore,
    *,
    run_id: str,
    output_dir: Path,
    held: dict[Unit, list[QuestionResult]],
    stop: EarlyStop,
    live: LiveRun | None,
    echo: Echo,
    name: str,
    docs: Docs,
) -> RunOutput:
    """Record a run the sequential gate stopped: `stopped` in the SQL store, its scored questions in
    predictions.jsonl, its MLflow run ended with the reason."""
    store.stop(run_id, stop)
    results = [r for rs in held.values() for r in rs]
    output_dir = own_folder(output_dir, run_id)
    predictions, why = output_dir / PREDICTIONS_FILE, output_dir / EARLY_STOP_FILE
    write_jsonl(predictions, results, docs)
    write_json(why, stop.to_json())
    if live is not None:
        live.stopped(stop, acc(results), name, files=(predictions, why))
    echo(f"run {run_id} {stop.summary()}; results in {output_dir}")
    return RunOutput(run_id, results, aggregate(results), None, output_dir, live.id if live else None, stop)


def _run(
    cfg: EvalConfig,
    output_dir: Path,
    store: SqlStore,
    *,
    progress: bool,
    echo: Echo,
    sweep: str | None,
    looks: Looks | None,
    command: list[str] | None,
) -> RunOutput:
    started = time.time()
    prep = _prepare(cfg, sweep, command)
    try:
        return _scored_run(cfg, output_dir, store, prep, started, progress=progress, echo=echo, looks=looks)
    finally:
        prep.lm.close()


def _scored_run(
    cfg: EvalConfig,
    output_dir: Path,
    store: SqlStore,
    prep: Prepared,
    started: float,
    *,
    progress: bool,
    echo: Echo,
    looks: Looks | None,
) -> RunOutput:
    shard = Shard(cfg.shard, cfg.shards)
    in_looks = plan_looks(prep.rendered, looks.count, cfg.seed) if looks is not None else []
    all_units = [u for look in in_looks for u in look] if looks is not None else units(cfg, prep.rendered)
    mine = assign(all_units, cfg.shards)[cfg.shard]
    if looks is not None:
        looks.begin(provisional(prep.start, prep.identity))
    if not mine:
        # More shards than units: this one has nothing to score. It claims no run, so starting late
        # (after the others finalized) never opens a second, empty run.
        echo(f"{shard} has no unit to score (this run has {len(all_units)} units): nothing to do")
        return RunOutput(None, [], None, None, output_dir, None)
    run_id, done = store.start_or_resume(prep.start, prep.identity, shard, str(output_dir))
    with Heartbeat(lambda: store.beat(run_id, shard), cfg.tracking.heartbeat_s):
        return _claimed(
            cfg, output_dir, store, prep, run_id, done=done, all_units=all_units, mine=mine,
            in_looks=in_looks, started=started, progress=progress, echo=echo, looks=looks,
        )  # fmt: skip


def _claimed(
    cfg: EvalConfig,
    output_dir: Path,
    store: SqlStore,
    prep: Prepared,
    run_id: str,
    *,
    done: dict[str, list[QuestionResult]],
    all_units: list[Unit],
    mine: list[Unit],
    in_looks: list[list[Unit]],
    started: float,
    progress: bool,
    echo: Echo,
    looks: Looks | None,
) -> RunOutput:
    """Score this process's units of the claimed run, then finalize it if this process is the last."""
    start, shard = prep.start, Shard(cfg.shard, cfg.shards)
    sharded = f" ({shard})" if cfg.shards > 1 else ""
    if done:
        n_done = sum(map(len, done.values()))
        echo(f"resuming run {run_id}{sharded}: {n_done} of {start.data.n_questions} questions were committed")
    # One MLflow run per run, open from the first shard's start; every shard logs its subjects to it.
    live = open_mlflow(cfg, store, run_id, start)
    scoring_started = time.time()
    held: dict[Unit, list[QuestionResult]] = {}
    counts = Counts()
    try:
        if looks is None:
            score(
                cfg, prep, store, run_id, everything=all_units, mine=mine, done=done, live=live,
                progress=progress, held=held, counts=counts,
            )  # fmt: skip
        elif stop := score_looks(
            cfg, prep, store, run_id, in_looks=in_looks, looks=looks, done=done, live=live,
            progress=progress, held=held, counts=counts,
        ):  # fmt: skip
            return _stopped(
                store, run_id=run_id, output_dir=output_dir, held=held, stop=stop, live=live, echo=echo,
                name=start.name, docs=prep.plan.docs(),
            )  # fmt: skip
    except BaseException as err:
        _failed(err, cfg, store, run_id, live=live, held=held, output_dir=output_dir)
        raise
    try:
        return _finalize(
            cfg, output_dir, store, prep, run_id, held=held, counts=counts, live=live, done=done,
            started=started, scoring_started=scoring_started, echo=echo, looks=looks,
        )  # fmt: skip
    except StoreVanished as err:
        raise _vanished(err, held, output_dir, run_id) from err


def _failed(
    err: BaseException,
    cfg: EvalConfig,
    store: SqlStore,
    run_id: str,
    *,
    live: LiveRun | None,
    held: dict[Unit, list[QuestionResult]],
    output_dir: Path,
) -> None:
    """Scoring failed with `err`: mark the shard (and an unsharded run) failed and end the MLflow
    run; raise the store's failures as one line that says how to go on (the caller re-raises the rest)."""
    from mmlu_track.store.db import StoreError

    with contextlib.suppress(StoreError):  # the database itself may be what failed
        store.end_shard(run_id, Shard(cfg.shard, cfg.shards), "failed")
        if cfg.shards == 1:
            store.mark(run_id, "failed")  # still resumable: its committed questions are kept
    if live is not None and cfg.shards == 1:  # a shard's end is not its run's: others may be at work
        live.end("KILLED" if isinstance(err, KeyboardInterrupt | SystemExit) else "FAILED")
    if isinstance(err, StoreVanished):
        raise _vanished(err, held, output_dir, run_id) from err
    if isinstance(err, StoreError):
        raise StoreError(
            f"{err}; the questions committed so far are kept: run the same command to resume"
        ) from err


def _vanished(
    err: StoreVanished, held: dict[Unit, list[QuestionResult]], output_dir: Path, run_id: str
) -> Exception:
    """The store went away under the run: keep what this process scored in its folder, say where."""
    from mmlu_track.store.db import StoreError

    kept = [r for rs in held.values() for r in rs]
    where = own_folder(output_dir, run_id) / PREDICTIONS_FILE
    write_jsonl(where, kept)
    return StoreError(
        f"{err}; the {len(kept)} questions this process scored are in {where}: point tracking.db_url at "
        "a database that stays, and run again"
    )


def _work(
    prep: Prepared, counts: Counts, *, started: float, scoring_started: float, finished: float
) -> ShardWork:
    """What this process did for the run (a shard: its part)."""
    return ShardWork(
        data_s=round(prep.data_s, 3), model_load_s=round(prep.model_load_s, 3),
        scoring_s=round(finished - scoring_started, 3), total_s=round(finished - started, 3),
        scored=counts.scored, forwarded=counts.forwarded, multi_pass=counts.multi_pass,
        prefix_fallbacks=counts.prefix_fallbacks,
    )  # fmt: skip


def _finalize(
    cfg: EvalConfig,
    output_dir: Path,
    store: SqlStore,
    prep: Prepared,
    run_id: str,
    *,
    held: dict[Unit, list[QuestionResult]],
    counts: Counts,
    live: LiveRun | None,
    done: dict[str, list[QuestionResult]],
    started: float,
    scoring_started: float,
    echo: Echo,
    looks: Looks | None,
) -> RunOutput:
    """This process's units are committed: finalize the run if it was the last to commit."""
    start, shard = prep.start, Shard(cfg.shard, cfg.shards)
    sharded = f" ({shard})" if cfg.shards > 1 else ""
    finished = time.time()
    own = [r for rs in held.values() for r in rs]
    scored_now = counts.scored
    work = _work(prep, counts, started=started, scoring_started=scoring_started, finished=finished)
    store.end_shard(run_id, shard, "done", work)
    if not store.claim_finalization(run_id, start.data.n_questions):
        echo(
            f"run {run_id}{sharded}: {len(held)} units ({len(own)} questions, {scored_now} scored now) "
            "committed; the shard that commits the run's last unit finalizes it"
        )
        return RunOutput(run_id, own, aggregate(own) if own else None, None, output_dir, None)
    results = _all_results(prep, store, run_id) if cfg.shards > 1 or looks is not None else own
    if truncated := sum(r.truncated for r in results):
        echo(f"warning: {truncated} prompts were truncated to their last tokens (allow_truncation=true)")
    agg = aggregate(results)
    if cfg.shards > 1:  # the run's work: every shard's that had ended (each ends before its claim)
        work = store.work(run_id, cfg.shards)
    record = run_record(
        start, run_id, results, agg, truncated=truncated, work=work, done=done, started=started
    )
    # A sharded run's results are the launch's, not its finalizing job's: in the sweep's folder.
    output_dir = own_folder(Path(start.sweep) if cfg.shards > 1 and start.sweep else output_dir, run_id)
    docs = prep.plan.docs()
    write_jsonl(output_dir / PREDICTIONS_FILE, results, docs)
    write_json(output_dir / RESULTS_FILE, record.to_json())
    store.finish(record, str(output_dir))
    echo(table(agg))
    seconds = finished - scoring_started
    echo(
        summary_line(record, len(results), scored_now, seconds, sharded=cfg.shards > 1, output_dir=output_dir)
    )
    if live is None and cfg.tracking.mlflow:
        live = open_mlflow(cfg, store, run_id, start)
    mlflow_id = finish_mlflow(cfg, store, record, results, live, docs=docs)
    if mlflow_id:
        echo(f"MLflow run {mlflow_id} (experiment {cfg.tracking.experiment!r})")
        if live is not None and (link := live.view_url()):
            echo(f"compare runs: {link}")
    return RunOutput(run_id, results, agg, record, output_dir, mlflow_id)
