"""Does the model know the answer, or the letter? A run's figures beyond accuracy, from its
question results.

**Circular** (`scoring.choice_order=circular`; OpenCompass's CircularEval, after Zheng et al. 2023,
"Large Language Models Are Not Robust Multiple Choice Selectors"): each question is asked in its
n cyclic rotations of its n choices (MMLU's four: ABCD, BCDA, CDAB, DABC; an MMLU-Pro question up
to 10; rotation 0 is the question as given). Per subject, category, macro and micro (as
`results.aggregate`):

- circular accuracy: the share of questions correct in all their rotations;
- mean accuracy over rotations: correct answers / prompts asked;
- consistency: the share of questions whose chosen *text* is the same in all their rotations.

Their standard errors treat each question as one draw (consistency, circular); the mean over
rotations counts n draws per question, which are not independent: its interval is too narrow and
is not shown.

**Letter bias** (every run): how often each letter is predicted against how often it is the gold
one, over every prompt asked (n per question in a circular run, where each of its letters is gold
equally often by construction); each letter's recall (correct / gold there); in a circular run, the share
of questions whose predicted *letter* was the same in all their rotations (the letter followed, not
the text). The letter-bias figures are descriptive: no test is made of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmlu_track.records import codec
from mmlu_track.records.results import Accuracies, QuestionResult, aggregate
from mmlu_track.settings.subjects import LETTERS


@dataclass(frozen=True)
class CircularScores:
    """A circular run's figures, each aggregated as `results.aggregate`: circular accuracy, the mean
    accuracy over each question's rotations, and consistency."""

    accuracy: Accuracies  # correct in all rotations
    mean_rotation: Accuracies  # over every prompt asked
    consistency: Accuracies  # the same text chosen in all rotations

    def to_json(self) -> dict[str, Any]:
        """The three figures by field name, each as `Accuracies.to_json`."""
        return codec.dump(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CircularScores:
        """The record `to_json` wrote; `RecordError` naming the field when a figure is missing or a
        value is not of its type."""
        return codec.load(cls, raw, "circular scores")


def circular_scores(results: Sequence[QuestionResult]) -> CircularScores | None:
    """A circular run's figures (None unless every question was asked in all its rotations)."""
    if not results or any(len(r.rotations) != r.options - 1 for r in results):
        return None
    return CircularScores(
        accuracy=aggregate(results, lambda r: (r.circular_correct,)),
        mean_rotation=aggregate(results, lambda r: tuple(c == r.gold for c in r.chosen)),
        consistency=aggregate(results, lambda r: (r.consistent,)),
    )


@dataclass(frozen=True)
class LetterBias:
    """How often each letter (A-D for MMLU, up to A-J) was predicted, was gold and was correct, over
    every prompt asked (each rotation of a circular run); descriptive counts, no test."""

    predicted: tuple[int, ...]  # prompts whose predicted letter is A, B, ... (one count per letter)
    gold: tuple[int, ...]  # prompts whose gold letter is A, B, ...
    correct: tuple[int, ...]  # correct prompts per gold letter
    invalid: int  # prompts answered with no letter
    letter_following: float | None  # circular runs: the share of questions with one letter in all rotations

    @property
    def recall(self) -> tuple[float | None, ...]:
        """Per letter, the share of prompts with that gold letter answered right (None: never gold)."""
        return tuple(c / g if g else None for c, g in zip(self.correct, self.gold, strict=True))

    def to_json(self) -> dict[str, Any]:
        """The counts as JSON-ready values, plus the derived `recall`."""
        return {**codec.dump(self), "recall": list(self.recall)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> LetterBias:
        """The record `to_json` wrote (`recall` recomputed, not read); `RecordError` naming the field
        when one is missing or not of its type (an integer per letter in each count)."""
        return codec.load(cls, raw, "letter bias")

    def line(self) -> str:
        """The console table's footer: one line."""
        asked = sum(self.gold)

        def shares(counts: Sequence[int]) -> str:
            return " ".join(
                f"{x} {100 * n / max(asked, 1):.0f}%" for x, n in zip(LETTERS, counts, strict=False)
            )

        recall = " ".join(
            f"{x} {'-' if v is None else f'{100 * v:.0f}%'}"
            for x, v in zip(LETTERS, self.recall, strict=False)
        )
        out = f"letters predicted {shares(self.predicted)} (gold {shares(self.gold)}); recall {recall}"
        if self.letter_following is not None:
            out += f"; the same letter in all rotations: {100 * self.letter_following:.1f}% of questions"
        return out


def letter_bias(results: Sequence[QuestionResult]) -> LetterBias:
    """Predicted and gold letters over every prompt asked (each rotation of a circular run)."""
    width = max((r.options for r in results), default=4)  # 4 for MMLU: its record as before
    predicted, gold, correct = [0] * width, [0] * width, [0] * width
    invalid = 0
    for r in results:
        answers = [r.prediction, *(a.prediction for a in r.rotations)]
        for rotation, letter in enumerate(answers):
            truth = (r.gold - rotation) % r.options  # where the gold text stands in that rotation
            gold[truth] += 1
            if letter is None:
                invalid += 1
                continue
            predicted[letter] += 1
            correct[truth] += letter == truth
    circular = bool(results) and all(len(r.rotations) == r.options - 1 for r in results)
    following = sum(r.letter_following for r in results) / len(results) if circular else None
    return LetterBias(tuple(predicted), tuple(gold), tuple(correct), invalid, following)


def circular_table(scores: Accuracies, circular: CircularScores) -> str:
    """The console's circular lines: per category, macro and micro, circular accuracy first (a
    circular run's headline), the accuracy as given beside it, the mean over rotations and
    consistency (per subject: results.json)."""
    circ, mean, same = (getattr(circular, f) for f in _FIGURES)
    rows = [(c, circ.categories[c], scores.categories[c], mean.categories[c], same.categories[c])
            for c in scores.categories]  # fmt: skip
    rows.append(("macro average", circ.macro, scores.macro, mean.macro, same.macro))
    rows.append(("micro average", circ.micro, scores.micro, mean.micro, same.micro))
    width = max(len(r[0]) for r in rows) + 2
    lines = [
        f"{'circular, acc %':<{width}}{'circular':>9}{'as given':>10}{'rotations':>11}{'consistent':>12}"
    ]
    lines += [
        f"{name:<{width}}"
        + "".join(f"{100 * a.acc:{w}.2f}" for a, w in zip(accs, (9, 10, 11, 12), strict=True))
        for name, *accs in rows
    ]
    return "\n".join(lines)


_FIGURES = ("accuracy", "mean_rotation", "consistency")
