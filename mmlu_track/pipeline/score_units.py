"""Scoring a run's units and committing each (the pipeline's inner loop), in plan order or in the
sequential gate's looks.

A unit's questions already committed are never scored again: a unit committed in part (a look of
a stopped sequential gate covers part of a unit) scores only its missing questions. Each scored
unit is committed at once (`SqlStore.save_unit`), and a subject complete in this process goes to
the live MLflow run. `Looks` is the sequential gate's side: after each committed look it may stop
the evaluation with an `EarlyStop`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from mmlu_track.config import EvalConfig
from mmlu_track.eval import prompts
from mmlu_track.eval.backend import Backend, ModelError, Progress, PromptError, Score, calibrate
from mmlu_track.eval.plan import Plan, Unit, pick
from mmlu_track.records.results import Accuracy, QuestionResult
from mmlu_track.records.run import EarlyStop, RunStart
from mmlu_track.records.stored import StoredRun
from mmlu_track.store.sql import Shard, SqlStore

if TYPE_CHECKING:
    from mmlu_track.store.mlflow import LiveRun

Done = dict[str, list[QuestionResult]]  # committed questions by subject


class Looks(Protocol):
    """The sequential gate's side of an evaluation scored in looks."""

    count: int  # looks over the whole plan

    def begin(self, candidate: StoredRun) -> None:
        """Before anything is recorded (`candidate`: the run about to start); raises to refuse the
        run (e.g. not comparable)."""

    def look(self, number: int, results: Sequence[QuestionResult]) -> EarlyStop | None:
        """Look `number` (1-based) is committed, with these results; an EarlyStop ends the run."""


def to_results(
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
            scored_by=s.scored_by,
        )
        for p, s, pred, margin in zip(batch, scores, predictions, margins, strict=True)
    ]


@dataclass(frozen=True)
class Prepared:
    lm: Backend
    plan: Plan
    rendered: dict[str, list[prompts.Prompt]]
    start: RunStart
    identity: str
    data_s: float
    model_load_s: float
    answer_lead: str = " "  # what precedes an answer letter (`prompts.Style.answer_lead`)


@dataclass
class Counts:
    multi_pass: int = 0
    prefix_fallbacks: int = 0
    forwarded: int = 0
    scored: int = 0  # questions scored by this process (the rest were committed before)


def committed(unit: Unit, prep: Prepared, done: Done) -> tuple[dict[int, QuestionResult], list[int]]:
    """The unit's committed results by plan position, and its positions still to score."""
    have = {r.index: r for r in done.get(unit.subject, ())}
    questions = prep.plan.questions[unit.subject]
    found = {i: have[questions[i].index] for i in unit.positions if questions[i].index in have}
    return found, [i for i in unit.positions if i not in found]


def score(
    cfg: EvalConfig,
    prep: Prepared,
    store: SqlStore,
    run_id: str,
    *,
    everything: list[Unit],
    mine: list[Unit],
    done: Done,
    live: LiveRun | None,
    progress: bool,
    held: dict[Unit, list[QuestionResult]],
    counts: Counts,
    desc: str = "MMLU",
) -> None:
    """Score this shard's units not yet committed; commit each; a subject complete in this process
    goes to the live MLflow run. `held` gets every unit this process holds results of."""
    from tqdm import tqdm

    shard = Shard(cfg.shard, cfg.shards)
    total = sum(len(u.positions) for u in mine)
    with tqdm(total=total, desc=desc, unit="q", disable=not progress, file=sys.stderr) as bar:
        for whole in mine:
            found, missing = committed(whole, prep, done)
            if not missing:
                held[whole] = [found[i] for i in whole.positions]
                bar.update(len(found))
                continue
            bar.update(len(found))
            bar.set_postfix_str(whole.subject)
            # Only the questions not yet committed (a look of the sequential gate commits a part).
            unit = whole if not found else pick(whole.subject, prep.rendered[whole.subject], tuple(missing))
            rendered = [prep.rendered[unit.subject][i] for i in unit.positions]
            scores = _scored(cfg, prep, rendered, bar.update)
            counts.multi_pass += sum(s.multi_pass for s in scores)
            counts.prefix_fallbacks += sum(s.prefix_fallback for s in scores)
            counts.forwarded += sum(s.forwarded for s in scores)
            new = to_results(rendered, scores, cfg.scoring.calibration)
            counts.scored += len(new)
            store.save_unit(run_id, new, shard)
            by_position = {**found, **dict(zip(unit.positions, new, strict=True))}
            held[whole] = [by_position[i] for i in whole.positions]
            if live is not None:
                _log_subject(
                    unit.subject,
                    cfg=cfg,
                    prep=prep,
                    store=store,
                    run_id=run_id,
                    everything=everything,
                    held=held,
                    live=live,
                )


def _log_subject(
    subject: str,
    *,
    cfg: EvalConfig,
    prep: Prepared,
    store: SqlStore,
    run_id: str,
    everything: list[Unit],
    held: dict[Unit, list[QuestionResult]],
    live: LiveRun,
) -> None:
    """A subject complete in this process goes to the live MLflow run, with the run's progress; in a
    sharded run, a subject whose slices other shards scored goes there from the shard that commits
    its last slice, and the progress is the whole run's, from the store (a shard holds its own)."""
    units = [u for u in everything if u.subject == subject]
    mine = [r for u in units for r in held[u]] if all(u in held for u in units) else None
    if cfg.shards == 1:
        if mine is not None:
            held_now = [r for rs in held.values() for r in rs]
            live.subject_done(subject, acc(mine), len({r.subject for r in held_now}), acc(held_now))
        return
    committed = store.committed_by_subject(run_id)
    if committed.get(subject, (0, 0))[0] < len(prep.plan.questions[subject]):
        return
    whole = {s for s, (n, _) in committed.items() if n == len(prep.plan.questions[s])}
    n, k = (sum(v[i] for v in committed.values()) for i in (0, 1))
    so_far = Accuracy(n=n, correct=k, acc=k / n, stderr=None)
    live.subject_done(subject, acc(mine or store.question_results(run_id, subject)), len(whole), so_far)


def _scored(
    cfg: EvalConfig, prep: Prepared, rendered: list[prompts.Prompt], progress: Progress
) -> list[Score]:
    try:
        return prep.lm.score(
            [p.text for p in rendered],
            cfg.scoring,
            cfg.batch_size,
            progress,
            prefixes=[p.prefix for p in rendered],
            max_tokens=cfg.batch_tokens,
            answer_lead=prep.answer_lead,
            messages=chat if (chat := [p.messages for p in rendered if p.messages]) else None,
        )
    except PromptError as err:
        if err.position is None:
            raise
        q = rendered[err.position].question
        raise ModelError(
            f"{q.subject} question {q.index}: {err}; the questions committed so far are kept: "
            "run the same command to resume"
        ) from err


def score_looks(
    cfg: EvalConfig,
    prep: Prepared,
    store: SqlStore,
    run_id: str,
    *,
    in_looks: list[list[Unit]],
    looks: Looks,
    done: Done,
    live: LiveRun | None,
    progress: bool,
    held: dict[Unit, list[QuestionResult]],
    counts: Counts,
) -> EarlyStop | None:
    """Score look after look until `looks` stops the run (its EarlyStop) or none is left (None)."""
    everything = [u for look in in_looks for u in look]
    for number, look in enumerate(in_looks, 1):
        score(
            cfg, prep, store, run_id, everything=everything, mine=look, done=done, live=live,
            progress=progress, held=held, counts=counts, desc=f"look {number}/{len(in_looks)}",
        )  # fmt: skip
        if (stop := looks.look(number, [r for u in look for r in held[u]])) is not None:
            return stop
    return None


def acc(results: Sequence[QuestionResult]) -> Accuracy:
    return Accuracy.of([r.correct for r in results])
