"""Reading the answer: the one home of how a score becomes a predicted letter.

- log-prob scoring: the argmax over the question's letters' log-probs (`argmax`: the first of
  equal values, as numpy's), after the subject's letter-bias calibration (`calibrate`, each letter
  over the questions that have it); the margin is the gap between the top two (calibrated) values.
- generation scoring: `read_answer` by `scoring.extract` (`first_char`: the first non-whitespace
  character, `parse_generation`; `pattern`: the first of `scoring.patterns` that matches;
  `cascade`: a chain of thought read by MMLU-Pro's rules in order, `extract`, the rule recorded). The
  in-process greedy decoder also asks it when a row's answer is decided (`generate.decided`).

Backends report what the model said (`Score`); `to_results` turns one unit's scores into the
`QuestionResult`s the stores keep. No torch here.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

import numpy as np

from mmlu_track.eval.backend import PromptError, Score
from mmlu_track.eval.prompts import Prompt
from mmlu_track.records.results import QuestionResult, RotatedAnswer
from mmlu_track.settings.config import ScoringConfig
from mmlu_track.settings.subjects import LETTERS, letters

LogProbs = tuple[float, ...]  # one per option of the question, A first

# A log-probability is at most 0. Computed in float32 (log_softmax over the vocabulary: in-process,
# and the engines' samplers) its rounding error is a few ulps of the log-sum-exp, under 1e-5 for any
# logits a model produces (|log-sum-exp| < 100: ulp 7.6e-6), and servers print six decimals or more:
# a value above 1e-4 is no rounding but a broken model or server.
LOGPROB_TOLERANCE = 1e-4


def check(scores: Sequence[Score]) -> None:
    """Every letter log-prob is finite and at most `LOGPROB_TOLERANCE`, or the prompt is refused
    (`PromptError` at its position: the caller names the question), never scored: a NaN from a
    broken weight file, an fp16 overflow or a server, a positive value that no probability has."""
    for position, score in enumerate(scores):
        for letter, value in zip(LETTERS, score.logprobs or (), strict=False):
            if not math.isfinite(value) or value > LOGPROB_TOLERANCE:
                err = PromptError(
                    f"the log-prob of {letter} is {value!r}, which no probability has (finite and at "
                    "most 0): refused, never scored"
                )
                err.position = position
                raise err


def per_letter(values: Sequence[float], options: int) -> LogProbs:
    """Exactly one value per option as a tuple of floats; any other count is a bug upstream."""
    if len(values) != options:
        raise ValueError(f"{len(values)} log-probs for a question with {options} options (a bug)")
    return tuple(float(v) for v in values)


def argmax(values: Sequence[float]) -> int:
    """The index of the largest value, the first of equal ones."""
    return int(np.argmax(np.asarray(values, dtype=np.float64)))


def parse_generation(text: str, options: int = 4) -> int | None:
    """The answer index from a generation: its first non-whitespace character, if one of the
    question's letters (A-D for four options)."""
    stripped = text.lstrip()
    if stripped and stripped[0] in letters(options):
        return LETTERS.index(stripped[0])
    return None


def read_answer(text: str, cfg: ScoringConfig, options: int = 4) -> int | None:
    """The answer index a generation gives by `cfg.extract`: `first_char` (`parse_generation`), or
    `pattern`, the group of the first of `cfg.patterns` that matches anywhere in the text (a
    pattern's own anchors and flags apply); None when nothing reads as one of the question's letters."""
    if cfg.extract == "first_char":
        return parse_generation(text, options)
    for pattern in cfg.patterns:
        if (found := re.search(pattern, text)) and found.group(1) in letters(options):
            return LETTERS.index(found.group(1))
    return None


# MMLU-Pro's chain-of-thought extraction (TIGER-AI-Lab's evaluate_from_local.py: extract_answer,
# extract_again, extract_final), tried in order; each question records which rule read its answer.
CASCADE = (
    ("answer is", re.compile(r"answer is \(?([A-J])\)?")),  # lm-eval mmlu_pro's one filter too
    ("answer:", re.compile(r".*[aA]nswer:\s*([A-J])")),
    ("last letter", re.compile(r"\b([A-J])\b(?!.*\b[A-J]\b)", re.DOTALL)),
)
NO_ANSWER = "none"  # no rule read a letter: counted wrong (or guessed, `scoring.failed=random`)
BEYOND = "beyond"  # the letter read is not one of the question's: counted wrong


def extract(text: str, options: int) -> tuple[int | None, str]:
    """The answer a chain of thought gives and the rule that read it (`CASCADE`'s name); (None,
    `NO_ANSWER`) when none reads a letter, (None, `BEYOND`) when the letter is not one of the
    question's `options`."""
    for name, pattern in CASCADE:
        if found := pattern.search(text):
            index = LETTERS.index(found.group(1))
            return (index, name) if index < options else (None, BEYOND)
    return None, NO_ANSWER


def guess(seed: int, subject: str, index: int, options: int) -> int:
    """The seeded uniform guess of a question no rule answered (`scoring.failed=random`, as the
    official script guesses): the same for the same seed and question, whatever the batching."""
    import random

    return random.Random(f"{seed}:{subject}:{index}").randrange(options)


def calibrate(logprobs: np.ndarray, method: str) -> np.ndarray:
    """One subject's (n, letters) log-prob matrix as the argmax should see it; a question without a
    letter (fewer options than the widest) has NaN there.

    `none`: unchanged. `mean`: each letter's mean log-prob over the subject's questions that have
    it subtracted, which removes a model's constant preference for some letters.
    """
    if method == "none":
        return logprobs
    if method == "mean":
        return np.asarray(logprobs - np.nanmean(logprobs, axis=0, keepdims=True))
    raise ValueError(f"unknown calibration {method!r}")


def predict(logprobs: Sequence[LogProbs], calibration: str) -> tuple[list[int], list[float]]:
    """Each row's predicted letter (among its own) and its margin (top value minus the second),
    calibrated."""
    width = max(len(row) for row in logprobs)
    matrix = np.full((len(logprobs), width), np.nan)
    for i, row in enumerate(logprobs):
        matrix[i, : len(row)] = row
    ranked = np.where(np.isnan(calibrated := calibrate(matrix, calibration)), -np.inf, calibrated)
    top2 = np.sort(ranked, axis=1)[:, -2:]
    return [argmax(row) for row in ranked], [float(m) for m in top2[:, 1] - top2[:, 0]]


def to_results(
    batch: Sequence[Prompt], scores: Sequence[Score], scoring: ScoringConfig
) -> list[QuestionResult]:
    """One unit's prompts and their scores as results: log-prob rows predicted here (calibrated
    over the unit's subject), generations as their backend read them (`read_answer`, `extract`); a
    chain of thought no rule answered guessed with `scoring.failed=random`."""
    predictions: list[int | None] = [s.prediction for s in scores]
    margins: list[float | None] = [None] * len(scores)
    extraction = [s.extraction for s in scores]
    logprobs = [s.logprobs for s in scores if s.logprobs is not None]
    if scores and len(logprobs) == len(scores):
        predicted, gaps = predict(logprobs, scoring.calibration)
        predictions, margins = list(predicted), list(gaps)
    if scoring.failed == "random":
        for i, (p, s) in enumerate(zip(batch, scores, strict=True)):
            if s.extraction == NO_ANSWER:
                q = p.question
                predictions[i] = guess(scoring.failed_seed, q.subject, q.index, len(q.choices))
                extraction[i] = "guess"
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
            options=len(p.question.choices),
            src=p.question.src,
            extraction=how,
            new_tokens=s.new_tokens,
            finish=s.finish,
        )
        for p, s, pred, margin, how in zip(batch, scores, predictions, margins, extraction, strict=True)
    ]


def with_rotations(each: Sequence[Sequence[QuestionResult]]) -> list[QuestionResult]:
    """Rotation 0's results (the questions as given) carrying the other rotations' answers
    (`QuestionResult.rotations`); `each` holds the results of every rotation asked, in order: rotation
    r those of the questions with more than r choices, in the questions' order."""
    first, *others = each
    if not others:
        return list(first)
    later: dict[tuple[str, int], list[RotatedAnswer]] = {(r.subject, r.index): [] for r in first}
    for results in others:
        for o in results:
            later[(o.subject, o.index)].append(RotatedAnswer(o.prediction, o.logprobs, o.generated))
    return [dataclasses.replace(r, rotations=tuple(later[(r.subject, r.index)])) for r in first]
