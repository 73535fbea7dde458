"""Per-question records, aggregation with standard errors, and their files.

Accuracy of a group of questions is their mean correctness (micro within the group), as the
original paper computes subcategory and category scores. `macro` is the unweighted mean of the
subject accuracies; `micro` is over all questions (lm-eval-harness's `mmlu` group score).
Standard errors: a subject's is the sample standard deviation of correctness (ddof=1) over
sqrt(n), as lm-eval-harness reports; macro's is sqrt(sum of the subject variances)/K.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmlu_track.records import codec
from mmlu_track.settings.subjects import CATEGORIES, LETTERS, SUBCATEGORY, category


@dataclass(frozen=True)
class RotatedAnswer:
    """A question's answer in one other rotation of its n choices (`scoring.choice_order=circular`):
    rotation r shows choice i under letter (i - r) % n, so `prediction` (a letter of that prompt)
    chose the original choice (prediction + r) % n. `logprobs` are that prompt's letters, A first."""

    prediction: int | None
    logprobs: tuple[float, ...] | None = None
    generated: str | None = None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RotatedAnswer:
        """The answer as stored with its question (`QuestionResult.to_json`); `RecordError` naming
        the field when `prediction` is missing or a value is not of its type."""
        return codec.load(cls, doc, "rotated answer")


@dataclass(frozen=True)
class QuestionResult:
    """One scored question. `index` is its position in its subject's test split.

    `logprobs` (one per option, A first, raw) for logprob scoring, `generated` (raw text) for
    generate scoring; `prediction` is None when a generation was not one of the question's letters
    (counted wrong, `valid` False). `options`: how many choices the question has (MMLU's 4; MMLU-Pro's
    2 to 10); `src`: where MMLU-Pro took the question from (`ori_mmlu-*`: MMLU), None for MMLU.
    `margin`: the chosen letter's score minus the runner-up's (logprob scoring only).
    `scored_by`: how the backend got it: `logits` or `greedy` in-process; a served model's
    `top_logprobs`, `echo` or `completion` (`eval/openai_api.py`); None: stored before it was recorded.
    """

    subject: str
    index: int
    prompt_hash: str
    shots_used: int
    n_tokens: int
    truncated: bool
    logprobs: tuple[float, ...] | None
    generated: str | None
    prediction: int | None
    gold: int
    margin: float | None
    scored_by: str | None = None
    # A circular run's rotations 1..n-1 (rotation 0 is the question as given: the fields above).
    rotations: tuple[RotatedAnswer, ...] = ()
    # Its MMLU-Redux annotation where the run was given some (data.annotations): `ok` or the error
    # type (`records.annotations.ERROR_TYPES`); None: not annotated, or none given.
    annotation: str | None = None
    options: int = 4  # as before questions could have other than four
    src: str | None = None
    # A chain of thought (`scoring.extract=cascade`): which rule read its answer (`answers.CASCADE`'s
    # name, `none`, `beyond`, or `guess`), how many tokens it generated and why it ended (`stop`,
    # `end`, `length`: cut by the token limit). None: not a chain of thought.
    extraction: str | None = None
    new_tokens: int | None = None
    finish: str | None = None

    @property
    def correct(self) -> bool:
        """Whether the prediction as given (rotation 0) is the gold answer; an invalid one never is."""
        return self.prediction == self.gold

    @property
    def chosen(self) -> tuple[int | None, ...]:
        """The original choice picked in each rotation, 0..n-1 (None: no letter), rotation 0 first."""
        picks = [self.prediction, *(a.prediction for a in self.rotations)]
        return tuple(None if p is None else (p + r) % self.options for r, p in enumerate(picks))

    @property
    def circular_correct(self) -> bool:
        """Correct in every rotation asked (OpenCompass's CircularEval); as given, just `correct`."""
        return all(c == self.gold for c in self.chosen)

    @property
    def consistent(self) -> bool:
        """The same choice's text picked in every rotation."""
        chosen = self.chosen
        return chosen[0] is not None and len(set(chosen)) == 1

    @property
    def letter_following(self) -> bool:
        """The same letter picked in all n rotations, so a different text each time (circular only)."""
        picks = [self.prediction, *(a.prediction for a in self.rotations)]
        return len(picks) == self.options and picks[0] is not None and len(set(picks)) == 1

    def outcome(self, metric: str) -> bool:
        """The question's binary outcome the gate compares: `accuracy` or `circular`."""
        return self.circular_correct if metric == "circular" else self.correct

    @property
    def valid(self) -> bool:
        """Whether the answer as given was one of the question's letters (a prediction, not None)."""
        return self.prediction is not None

    def to_json(self) -> dict[str, Any]:
        """Every field as JSON-ready values, plus the derived `correct`, `predicted_letter` (None when
        invalid) and `gold_letter`."""
        rec = codec.dump(self)
        rec["correct"] = self.correct
        rec["predicted_letter"] = LETTERS[self.prediction] if self.prediction is not None else None
        rec["gold_letter"] = LETTERS[self.gold]
        return rec

    @classmethod
    def from_json(cls, rec: dict[str, Any]) -> QuestionResult:
        """The result `to_json` wrote (derived and unknown keys ignored; `scored_by`, `rotations` and
        `annotation` may be absent, as in older files); `RecordError` naming the field when another
        is missing or a value is not of its type."""
        return codec.load(cls, rec, "question result")


@codec.closed
@dataclass(frozen=True)
class Accuracy:
    """The accuracy of a group of n questions: `correct` of them, `acc` = correct / n as a fraction
    (0.0 for no questions), and its standard error."""

    n: int
    correct: int
    acc: float
    stderr: float | None  # None when n < 2

    def interval(self, alpha: float = 0.05) -> tuple[float, float]:
        """Wilson score interval: inside [0, 1] and never a point, even at 0/n or n/n."""
        from mmlu_track.stats.paired import wilson

        return wilson(self.correct, self.n, alpha)

    @classmethod
    def of(cls, correct: Sequence[bool]) -> Accuracy:
        """The accuracy of these outcomes, its standard error sqrt(p(1 - p)/(n - 1)) (the sample
        standard deviation over sqrt(n)), None below two outcomes."""
        n = len(correct)
        k = sum(correct)
        p = k / n if n else 0.0
        se = math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else None
        return cls(n=n, correct=k, acc=p, stderr=se)


@dataclass(frozen=True)
class Accuracies:
    """A run's accuracies (`aggregate`): per subject, subcategory and category, macro and micro, the
    number of answers that were not one of the question's letters (counted wrong), and `chance`, the
    accuracy of a uniform guess (the mean of 1/options: 0.25 for MMLU).

    MMLU-Pro (questions with a `src`): its 14 categories are the subjects, there are no
    subcategories, and the categories are where the questions came from (`ORIGINS`)."""

    subjects: dict[str, Accuracy]
    subcategories: dict[str, Accuracy]
    categories: dict[str, Accuracy]
    macro: Accuracy
    micro: Accuracy
    invalid: int
    chance: float = 0.25  # as before questions could have other than four options

    def to_json(self) -> dict[str, Any]:
        """The record as nested JSON-ready dicts, each `Accuracy` as its fields."""
        return codec.dump(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Accuracies:
        """The record `to_json` wrote (an `Accuracy` with a key it has no field for is refused);
        `RecordError` naming the field when one is missing or not of its type."""
        return codec.load(cls, raw, "accuracies")


Outcomes = Callable[[QuestionResult], Sequence[bool]]


def _correct(r: QuestionResult) -> Sequence[bool]:
    return (r.correct,)


# MMLU-Pro's questions by origin (`src`): taken from MMLU (`ori_mmlu-*`), or added by MMLU-Pro.
FROM_MMLU = "ori_mmlu-"
ORIGINS = ("from MMLU", "new in MMLU-Pro")


def origin(r: QuestionResult) -> str | None:
    """Where an MMLU-Pro question came from (one of `ORIGINS`); None for an MMLU question."""
    if r.src is None:
        return None
    return ORIGINS[0] if r.src.startswith(FROM_MMLU) else ORIGINS[1]


def is_pro(results: Iterable[QuestionResult]) -> bool:
    """Whether these are MMLU-Pro results (their questions carry a `src`), grouped by category."""
    return any(r.src is not None for r in results)


def aggregate(results: Iterable[QuestionResult], outcomes: Outcomes = _correct) -> Accuracies:
    """Accuracies of every subject present, their subcategories and categories (MMLU-Pro: by
    origin), macro and micro; of `outcomes` (each question's booleans: by default whether it is
    correct as given)."""
    by_subject: dict[str, list[bool]] = {}
    by_origin: dict[str, list[bool]] = {}
    invalid = 0
    guess = 0.0
    asked = 0
    for r in results:
        got = outcomes(r)
        by_subject.setdefault(r.subject, []).extend(got)
        if (where := origin(r)) is not None:
            by_origin.setdefault(where, []).extend(got)
        invalid += not r.valid
        guess += 1 / r.options
        asked += 1
    if not by_subject:
        raise ValueError("no results to aggregate")
    subjects = {s: Accuracy.of(c) for s, c in sorted(by_subject.items())}
    by_sub: dict[str, list[bool]] = {}
    by_cat: dict[str, list[bool]] = {}
    for s, c in by_subject.items() if not by_origin else ():
        by_sub.setdefault(SUBCATEGORY[s], []).extend(c)
        by_cat.setdefault(category(s), []).extend(c)
    subcategories = {k: Accuracy.of(v) for k, v in sorted(by_sub.items())}
    categories = {k: Accuracy.of(by_cat[k]) for k in CATEGORIES if k in by_cat}
    categories.update({k: Accuracy.of(by_origin[k]) for k in ORIGINS if k in by_origin})
    accs = [a.acc for a in subjects.values()]
    variances = [a.stderr**2 for a in subjects.values() if a.stderr is not None]
    n_total = sum(a.n for a in subjects.values())
    macro = Accuracy(
        n=n_total,
        correct=sum(a.correct for a in subjects.values()),
        acc=sum(accs) / len(accs),
        stderr=math.sqrt(sum(variances)) / len(accs) if len(variances) == len(accs) else None,
    )
    micro = Accuracy.of([c for cs in by_subject.values() for c in cs])
    return Accuracies(subjects, subcategories, categories, macro, micro, invalid, guess / asked)


Docs = Mapping[tuple[str, int], Mapping[str, object]]  # (subject, index) -> the question's own fields


def write_jsonl(path: Path, results: Iterable[QuestionResult], docs: Docs | None = None) -> None:
    """One JSON line per question result; with `docs`, each line also carries its question's text
    and choices (as lm-evaluation-harness's `--log_samples` does), so a reader needs no dataset.
    A path ending `.gz` is written gzipped."""
    texts = docs or {}
    rows = ({**r.to_json(), **texts.get((r.subject, r.index), {})} for r in results)
    lines = (json.dumps(row, ensure_ascii=False) for row in rows)
    text = "".join(f"{line}\n" for line in lines).encode("utf-8")
    # `.gz`: gzipped with no timestamp in its header, so the same rows give the same bytes
    path.write_bytes(gzip.compress(text, mtime=0) if path.suffix == ".gz" else text)


def macro_interval(scores: Accuracies, alpha: float = 0.05) -> tuple[float, float]:
    """The macro average's Wilson interval at Kish's effective sample size (see paired.py)."""
    from mmlu_track.stats.paired import macro_accuracy_interval

    accs = list(scores.subjects.values())
    return macro_accuracy_interval([a.correct for a in accs], [a.n for a in accs], alpha)


def _pct(a: Accuracy, interval: tuple[float, float] | None = None) -> str:
    low, high = interval or a.interval()
    return f"{100 * a.acc:6.2f} [{100 * low:5.1f}, {100 * high:5.1f}]  {a.correct:>6}/{a.n:<6}"


def table(scores: Accuracies) -> str:
    """A readable console table: subjects, categories, then macro and micro, with 95% intervals
    (Wilson; macro at Kish's effective sample size)."""
    width = max(len(s) for s in [*scores.subjects, *scores.categories, "macro average"]) + 2
    lines = [f"{'subject':<{width}}{'acc %':>6} {'95% interval':<14}  {'correct/n':>13}", "-" * (width + 38)]
    lines += [f"{s:<{width}}{_pct(a)}" for s, a in scores.subjects.items()]
    lines.append("-" * (width + 38))
    lines += [f"{c:<{width}}{_pct(a)}" for c, a in scores.categories.items()]
    lines.append("-" * (width + 38))
    lines.append(f"{'macro average':<{width}}{_pct(scores.macro, macro_interval(scores))}")
    lines.append(f"{'micro average':<{width}}{_pct(scores.micro)}")
    if scores.invalid:
        lines.append(f"{scores.invalid} answers were not one of their question's letters (counted wrong)")
    if scores.chance != 0.25:
        lines.append(f"chance (a uniform guess over each question's options): {100 * scores.chance:.2f}%")
    return "\n".join(lines)
