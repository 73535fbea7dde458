"""One process's evaluation of one run, as an object: `EvaluationSession`.

A session is made once per process from the prepared run (`prepare.Prepared`: plan, rendered
prompts, model, start record, identity) and its `RunRecorder` (the SQL store and MLflow); it holds
what lives through the run — the shard's units, the questions committed before (`done`), the
results it holds (`held`), what it counted — and has the run's steps as methods:

- `run()`: claim the run (or resume it), then score this shard's units, each committed at once;
  a subject complete in this process goes to MLflow.
- `_finalize()`: the process that commits the run's last unit aggregates it, once (the store's
  atomic `claim_finalization`): results.json, predictions.jsonl, the SQL record, MLflow.
- `_stopped(stop)`: the sequential gate (`Looks`, observing each committed look) stopped the run.
- `_failed(err)`: scoring failed; the run stays resumable with what it committed.

A unit's questions already committed are never scored again: a unit committed in part (a look of
a stopped sequential gate covers part of a unit) scores only its missing questions.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from mmlu_track.eval.answers import check, to_results, with_rotations
from mmlu_track.eval.ask import ask, per_question
from mmlu_track.eval.backend import (
    ModelError,
    Progress,
    PromptError,
)
from mmlu_track.eval.plan import Asked, Unit, assign, pick, units
from mmlu_track.eval.plan import looks as plan_looks
from mmlu_track.pipeline.outputs import (
    EARLY_STOP_FILE,
    PREDICTIONS_FILE,
    RESULTS_FILE,
    abandoned_line,
    own_folder,
    summary_line,
    write_json,
)
from mmlu_track.pipeline.prepare import Prepared
from mmlu_track.records.annotations import annotated_scores
from mmlu_track.records.reasoning import reasoning
from mmlu_track.records.results import Accuracies, Accuracy, QuestionResult, aggregate, table, write_jsonl
from mmlu_track.records.robustness import circular_scores, circular_table, letter_bias
from mmlu_track.records.run import EarlyStop, RunRecord
from mmlu_track.records.stored import ShardWork, StoredRun
from mmlu_track.settings.config import EvalConfig
from mmlu_track.store.db import StoreError, StoreVanished
from mmlu_track.store.recorder import Done, RunRecorder
from mmlu_track.store.rows import provisional
from mmlu_track.store.sql import SqlStore

Echo = Callable[[str], None]


class Looks(Protocol):
    """The sequential gate, observing an evaluation scored in looks."""

    count: int  # looks over the whole plan
    store: SqlStore  # the gate's SQL store, which the evaluation records through (one per command)

    def begin(self, candidate: StoredRun) -> None:
        """Before anything is recorded (`candidate`: the run about to start); raises to refuse the
        run (e.g. not comparable)."""

    def look(self, number: int, results: Sequence[QuestionResult]) -> EarlyStop | None:
        """Look `number` (1-based) is committed, with these results; an EarlyStop ends the run."""

    def recorded(self, candidate: StoredRun) -> bool:
        """Whether the gate already gave its verdict on `candidate` (a finished or stopped run of
        this command's identity) under these settings, against the baseline it would take now: then
        nothing is scored and the gate concludes with that verdict."""


@dataclass(frozen=True)
class Display:
    """What the user sees of a session: its lines and, on stderr, a progress bar."""

    echo: Echo = print
    progress: bool = True


QUIET = Display(lambda _: None, progress=False)  # nothing shown (tests, benchmarks, the noise command)


@dataclass(frozen=True)
class RunOutput:
    """What one process's session ends with (`EvaluationSession.run`): the run it worked on, the
    results it holds (all of the run's when it finalized), their accuracies, where they were written."""

    run_id: str | None  # None for a shard that had no unit to score (it touched no run)
    results: list[QuestionResult]
    scores: Accuracies | None  # None for a shard that had no unit to score
    record: RunRecord | None  # None for a shard that did not finalize its run (`results`: its own)
    output_dir: Path
    mlflow_run_id: str | None
    stopped: EarlyStop | None = None  # the sequential gate stopped it (`results`: the questions scored)
    reused: bool = False  # a finished run of the same identity, taken as it is: nothing scored now


def acc(results: Sequence[QuestionResult]) -> Accuracy:
    """The accuracy of these results as given (rotation 0), with its standard error (`Accuracy.of`)."""
    return Accuracy.of([r.correct for r in results])


class EvaluationSession:
    """One process's part of one run (see the module's docstring)."""

    def __init__(
        self,
        cfg: EvalConfig,
        prep: Prepared,
        recorder: RunRecorder,
        output_dir: Path,
        *,
        display: Display,
        looks: Looks | None = None,
    ) -> None:
        """The settings, the prepared run, its recorder (which shard this process is), the output folder,
        what the user sees, and the sequential gate when the run is scored in looks; records nothing yet."""
        self.cfg, self.prep, self.recorder, self.output_dir = cfg, prep, recorder, output_dir
        self.echo, self.progress, self.looks = display.echo, display.progress, looks
        self.shard = recorder.shard
        self.sharded = self.shard.count > 1
        self.in_looks = plan_looks(prep.rendered, looks.count, cfg.seed) if looks is not None else []
        everything = [u for look in self.in_looks for u in look] if looks else units(cfg, prep.rendered)
        self.everything: list[Unit] = everything
        self.my_units = assign(everything, self.shard.count)[self.shard.index]
        self.done: Done = {}  # committed before this process started (a resume)
        self.held: dict[Unit, list[QuestionResult]] = {}  # every unit this process holds results of
        self.work, self.scoring_started = ShardWork(), time.time()  # this process's, from its claim

    @property
    def _which(self) -> str:
        return f" ({self.shard})" if self.sharded else ""

    def _own(self) -> list[QuestionResult]:
        return [r for rs in self.held.values() for r in rs]

    def run(self) -> RunOutput:
        """Claim or resume the run, score this shard's units not yet committed, and finalize the run if
        this process commits its last unit; a run the sequential gate stops returns with `stopped`.
        On failure the run is marked failed (resumable: committed units are kept) and the error
        raised; a shard with no unit claims nothing (`run_id` None)."""
        if self.looks is not None:
            self.looks.begin(provisional(self.prep.start, self.prep.identity))
        if not self.my_units:
            # More shards than units: this one has nothing to score. It claims no run, so starting late
            # (after the others finalized) never opens a second, empty run.
            self.echo(
                f"{self.shard} has no unit to score (this run has {len(self.everything)} units): "
                "nothing to do"
            )
            return RunOutput(None, [], None, None, self.output_dir, None)
        self.done = self.recorder.claim(self.prep.start, self.prep.identity, self.output_dir)
        with self.recorder.beating():
            return self._claimed()

    def _claimed(self) -> RunOutput:
        """Score this process's units of the claimed run, then finalize it if this process is the last."""
        if self.done:
            n_done, total = sum(map(len, self.done.values())), self.prep.start.data.n_questions
            where = f"{self.recorder.run_id}{self._which}"
            self.echo(f"resuming run {where}: {n_done} of {total} questions were committed")
        if threads := self.prep.start.host.threads:
            self.echo(f"scoring with {threads}")
        self.recorder.open_mirror()  # one MLflow run per run, open from the first shard's start
        self.work, self.scoring_started = ShardWork(), time.time()
        try:
            if self.looks is None:
                self._score(self.my_units)
            elif stop := self._score_looks(self.looks):
                return self._stopped(stop)
        except BaseException as err:
            self._failed(err)
            raise
        try:
            return self._finalize()
        except StoreVanished as err:
            raise self._vanished(err) from err
        except BaseException:
            self.recorder.abandon_finalization()
            raise

    # -- scoring ----------------------------------------------------------------------------------

    def _committed(self, unit: Unit) -> tuple[dict[int, QuestionResult], list[int]]:
        """The unit's committed results by plan position, and its positions still to score."""
        have = {r.index: r for r in self.done.get(unit.subject, ())}
        questions = self.prep.plan.questions[unit.subject]
        found = {i: have[questions[i].index] for i in unit.positions if questions[i].index in have}
        return found, [i for i in unit.positions if i not in found]

    def _score(self, todo: list[Unit], desc: str | None = None) -> None:
        """Score these units' questions not yet committed; commit each unit at once."""
        from tqdm import tqdm

        total = sum(len(u.positions) for u in todo)
        desc = desc or {"mmlu": "MMLU", "mmlu_pro": "MMLU-Pro"}[self.cfg.benchmark]
        with tqdm(total=total, desc=desc, unit="q", disable=not self.progress, file=sys.stderr) as bar:
            for whole in todo:
                found, missing = self._committed(whole)
                bar.update(len(found))
                if not missing:
                    self.held[whole] = [found[i] for i in whole.positions]
                    continue
                bar.set_postfix_str(whole.subject)
                # Only the questions not yet committed (a look of the sequential gate commits a part).
                given, asked = self.prep.rendered[whole.subject], self.prep.asked[whole.subject]
                unit = whole if not found else pick(whole.subject, given, tuple(missing))
                new = self._scored([asked[i] for i in unit.positions], bar.update)
                self.recorder.commit(new)
                by_position = {**found, **dict(zip(unit.positions, new, strict=True))}
                self.held[whole] = [by_position[i] for i in whole.positions]
                if self.recorder.mirrored:
                    self._log_subject(unit.subject)

    def _scored(self, questions: list[Asked], progress: Progress) -> list[QuestionResult]:
        """One unit's questions through the backend, as results; a prompt the backend cannot score
        is one line naming its question. Each question is asked as planned (`plan.rotations`: a
        circular run's rotations, one per choice, at once: they share the few-shot prefix),
        rotation-major: every question's rotation 0, then rotation 1 of those that have one, ..."""
        scoring = self.cfg.scoring
        width = max((len(q) for q in questions), default=1)
        asked = [[q[r] for q in questions if len(q) > r] for r in range(width)]
        flat = [p for ps in asked for p in ps]
        try:
            scores = ask(
                self.prep.lm, flat, scoring.method, self.prep.answer_lead,
                per_question(progress, len(questions), len(flat)),
            )  # fmt: skip
            check(scores)  # an impossible log-prob refuses its question, whichever backend gave it
        except PromptError as err:
            if err.position is None:
                raise
            q = flat[err.position].question
            r = next(r for r in range(width) if err.position < sum(len(ps) for ps in asked[: r + 1]))
            raise ModelError(
                f"{q.subject} question {q.index}{f' (rotation {r})' if r else ''}: {err}; the questions "
                "committed so far are kept: run the same command to resume"
            ) from err
        self.work += ShardWork(
            scored=len(questions),
            forwarded=sum(s.forwarded for s in scores),
            multi_pass=sum(s.multi_pass for s in scores),
            prefix_fallbacks=sum(s.prefix_fallback for s in scores),
        )
        each, start = [], 0
        for ps in asked:  # calibrated per rotation over the unit's questions asked in it
            each.append(to_results(ps, scores[start : start + len(ps)], scoring))
            start += len(ps)
        results = with_rotations(each)
        if (annotated := self.prep.plan.annotated) is None:
            return results
        return [replace(r, annotation=annotated.labels.get((r.subject, r.index))) for r in results]

    def _log_subject(self, subject: str) -> None:
        """A subject complete: the run's progress to MLflow (micro accuracy so far, at step =
        subjects done). In a sharded run, once the subject's last slice is committed by any shard,
        and the progress is the whole run's, from the store (a shard holds its own)."""
        units_of = [u for u in self.everything if u.subject == subject]
        if not self.sharded:
            if all(u in self.held for u in units_of):
                own = self._own()
                self.recorder.subject_done(len({r.subject for r in own}), acc(own))
            return
        committed = self.recorder.committed_by_subject()
        questions = self.prep.plan.questions
        if committed.get(subject, (0, 0))[0] < len(questions[subject]):
            return
        whole = {s for s, (n, _) in committed.items() if n == len(questions[s])}
        n, k = (sum(v[i] for v in committed.values()) for i in (0, 1))
        self.recorder.subject_done(len(whole), Accuracy(n=n, correct=k, acc=k / n, stderr=None))

    def _score_looks(self, looks: Looks) -> EarlyStop | None:
        """Score look after look until `looks` stops the run (its EarlyStop) or none is left (None)."""
        for number, look in enumerate(self.in_looks, 1):
            self._score(look, desc=f"look {number}/{len(self.in_looks)}")
            if (stop := looks.look(number, [r for u in look for r in self.held[u]])) is not None:
                return stop
        return None

    # -- the run's ends ---------------------------------------------------------------------------

    def _work(self, finished: float) -> ShardWork:
        """What this process did for the run (a shard: its part)."""
        prep, traffic = self.prep, self.prep.lm.traffic()
        return replace(
            self.work,
            data_s=round(prep.data_s, 3),
            model_load_s=round(prep.model_load_s, 3),
            scoring_s=round(finished - self.scoring_started, 3),
            total_s=round(finished - prep.started, 3),
            requests=traffic.requests,
            abandoned=traffic.abandoned,
            abandoned_s=traffic.abandoned_s,
        )

    def _finalize(self) -> RunOutput:
        """This process's units are committed: finalize the run if it was the last to commit."""
        start, run_id, recorder = self.prep.start, self.recorder.run_id, self.recorder
        finished = time.time()
        own = self._own()
        work = self._work(finished)
        recorder.end_shard(work)
        if not recorder.claim_finalization(start.data.n_questions):
            self.echo(
                f"run {run_id}{self._which}: {len(self.held)} units ({len(own)} questions, "
                f"{self.work.scored} scored now) committed; the shard that commits the run's last "
                "unit finalizes it"
            )
            return RunOutput(run_id, own, aggregate(own) if own else None, None, self.output_dir, None)
        results = own if not self.sharded and self.looks is None else self._all_results()
        if truncated := sum(r.truncated for r in results):
            self.echo(
                f"warning: {truncated} prompts were truncated to their last tokens (allow_truncation=true)"
            )
        agg = aggregate(results)
        if self.sharded:  # the run's work: every shard's that had ended (each ends before its claim)
            work = recorder.work()
        record = self._record(results, agg, work)
        # A sharded run's results are the launch's, not its finalizing job's: in the sweep's folder.
        base = Path(start.sweep) if self.sharded and start.sweep else self.output_dir
        output_dir = own_folder(base, run_id)
        docs = self.prep.plan.docs()
        write_jsonl(output_dir / PREDICTIONS_FILE, results, docs)
        write_json(output_dir / RESULTS_FILE, record.to_json())
        recorder.finish(record, output_dir)
        if record.circular:  # its headline first: circular accuracy, the accuracy as given beside it
            self.echo(circular_table(agg, record.circular))
        self.echo(table(agg))
        if record.letter_bias:
            self.echo(record.letter_bias.line())
        if record.reasoning:
            self.echo(record.reasoning.line())
        if record.annotated and start.data.annotations:
            self.echo(start.data.annotations.summary())
            self.echo(record.annotated.summary())
        seconds = finished - self.scoring_started
        n, now = len(results), self.work.scored
        self.echo(summary_line(record, n, now, seconds, sharded=self.sharded, output_dir=output_dir))
        if line := abandoned_line(record):
            self.echo(line)
        mlflow_id = recorder.mirror_finished(record, results, docs)
        if mlflow_id:
            self.echo(f"MLflow run {mlflow_id} (experiment {recorder.tracking.experiment!r})")
            if link := recorder.view_url():
                self.echo(f"compare runs: {link}")
        return RunOutput(run_id, results, agg, record, output_dir, mlflow_id)

    def _record(self, results: list[QuestionResult], agg: Accuracies, work: ShardWork) -> RunRecord:
        """The finished run's record: `results` are all of its questions, `work` what this process
        did (a sharded run: all its shards, summed)."""
        return RunRecord(
            run_id=self.recorder.run_id,
            start=self.prep.start,
            shots_used=dict(Counter(r.shots_used for r in results)),
            truncated=sum(r.truncated for r in results),
            multi_pass=work.multi_pass,
            prefix_fallbacks=work.prefix_fallbacks,
            timing=work.timing(
                resumed_subjects=len({r.subject for rs in self.done.values() for r in rs}),
                total_s=max(work.total_s, time.time() - self.prep.started),
            ),
            scores=agg,
            circular=circular_scores(results),
            letter_bias=letter_bias(results),
            annotated=annotated_scores(results) if self.prep.plan.annotated else None,
            reasoning=reasoning(results),
        )

    def _all_results(self) -> list[QuestionResult]:
        """Every committed question of the run, in plan order (the finalizing shard's view)."""
        by_key = {(r.subject, r.index): r for r in self.recorder.question_results()}
        return [by_key[(q.subject, q.index)] for q in self.prep.plan.all_questions]

    def _stopped(self, stop: EarlyStop) -> RunOutput:
        """Record a run the sequential gate stopped: its scored questions in predictions.jsonl, why
        in early_stop.json, `stopped` in the SQL store, its MLflow run ended with the reason."""
        run_id, results = self.recorder.run_id, self._own()
        output_dir = own_folder(self.output_dir, run_id)
        predictions, why = output_dir / PREDICTIONS_FILE, output_dir / EARLY_STOP_FILE
        write_jsonl(predictions, results, self.prep.plan.docs())
        write_json(why, stop.to_json())
        self.recorder.stop(stop, acc(results), files=(predictions, why))
        self.echo(f"run {run_id} {stop.summary()}; results in {output_dir}")
        return RunOutput(run_id, results, aggregate(results), None, output_dir, self.recorder.mlflow_id, stop)

    def _failed(self, err: BaseException) -> None:
        """Scoring failed with `err`: the recorder marks it; the store's own failures become one line
        that says how to go on (the caller re-raises the rest)."""
        self.recorder.fail(err)
        if isinstance(err, StoreVanished):
            raise self._vanished(err) from err
        if isinstance(err, StoreError):
            raise StoreError(
                f"{err}; the questions committed so far are kept: run the same command to resume"
            ) from err

    def _vanished(self, err: StoreVanished) -> Exception:
        """The store went away under the run: keep what this process scored in its folder, say where."""
        kept = self._own()
        where = own_folder(self.output_dir, self.recorder.run_id) / PREDICTIONS_FILE
        write_jsonl(where, kept)
        return StoreError(
            f"{err}; the {len(kept)} questions this process scored are in {where}: point tracking.db_url "
            "at a database that stays, and run again"
        )
