"""MMLU-Redux annotations as a run records them (Gema et al. 2024, "Are We Done with MMLU?", which
re-annotated MMLU questions by hand: about 6.5 % have a wrong key, no correct option, several,
or an unclear question or options).

- `ERROR_TYPES`: the annotation of one question, `ok` or the kind of error (the paper's names);
  `UNKNOWN`: a label that spells none of them (counted, never clean).
- `AnnotationSet` (in the run's `DataInfo`): what `data.annotations` named, the fingerprint of its
  content (two runs gated on `gate.questions=clean` must share it), and how its rows matched the
  evaluated subjects' test questions (by text and choices, never by row position): matched,
  unmatched (counted and shown, never dropped silently), of other subjects, conflicting.
- `AnnotatedScores` (in the run's record): the scored questions counted per annotation, and the
  accuracies on those annotated `ok` (per subject, category, macro, micro, as `aggregate`).

Each question's own annotation is `QuestionResult.annotation`. No I/O here: `eval/annotations.py`
reads and matches them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mmlu_track.records import codec
from mmlu_track.records.results import Accuracies, QuestionResult, aggregate

OK = "ok"
ERROR_TYPES = (
    OK,
    "wrong_groundtruth",
    "no_correct_answer",
    "multiple_correct_answers",
    "bad_question_clarity",
    "bad_options_clarity",
    "expert",
)
UNKNOWN = "unknown"  # an error_type that spells none of `ERROR_TYPES`: never clean
NOT_ANNOTATED = "not annotated"  # a scored question no annotation matched (counts only)
LABELS = (*ERROR_TYPES, UNKNOWN)  # what a question's annotation may be


@codec.closed
@dataclass(frozen=True)
class AnnotationSet:
    """The annotations a run was evaluated with (`data.annotations`): where they came from, the
    fingerprint of their content, and how their rows matched the evaluated subjects' test questions."""

    source: str  # data.annotations as given: a hub id or a local path
    fingerprint: str  # sha256 of the annotations' content (subject, question, choices, error type)
    rows: int  # annotations read
    matched: int  # found among the evaluated subjects' test questions
    unmatched: int  # of an evaluated subject, but no test question has their text and choices
    other_subjects: int  # of subjects this run does not evaluate
    conflicts: int = 0  # questions annotated twice, differently: taken as the error (never as ok)
    unmatched_examples: tuple[str, ...] = ()  # the first few unmatched: "subject: question…"
    per_label: dict[str, int] = field(default_factory=dict)  # rows read per label (`LABELS` order)

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict of its fields (`unmatched_examples` a list)."""
        return {**codec.dump(self), "unmatched_examples": list(self.unmatched_examples)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AnnotationSet:
        """The record `to_json` wrote (`unmatched_examples` may be missing: none; a key it has no
        field for is refused); `RecordError` naming the field that is missing or not of its type."""
        return codec.load(cls, doc, "annotation set")

    def summary(self) -> str:
        """One line: what was read and how it matched."""
        line = (
            f"annotations {self.source}: {self.rows:,} read, {self.matched:,} matched to this run's "
            f"subjects' questions, {self.unmatched:,} unmatched"
        )
        if self.unmatched_examples:
            line += f" (e.g. {self.unmatched_examples[0]!r})"
        if self.other_subjects:
            line += f", {self.other_subjects:,} of subjects not evaluated"
        if self.conflicts:
            line += f", {self.conflicts:,} question(s) annotated twice differently (taken as errors)"
        if self.per_label:
            line += "; rows per label: " + ", ".join(f"{k} {n:,}" for k, n in self.per_label.items())
        return line


@dataclass(frozen=True)
class AnnotatedScores:
    """A run's scored questions counted per annotation (`LABELS`, `NOT_ANNOTATED`; only those
    seen) and its accuracies on the questions annotated ok (None when no scored question is)."""

    counts: dict[str, int]  # scored questions per annotation (LABELS, NOT_ANNOTATED)
    clean: Accuracies | None = None  # on the questions annotated ok; None when no scored one is

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict: `counts`, and `clean` as `Accuracies.to_json` or None."""
        return codec.dump(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AnnotatedScores:
        """The record `to_json` wrote; a missing `clean` reads as None; `RecordError` naming
        the field when `counts` is missing or a value is not of its type."""
        return codec.load(cls, doc, "annotated scores")

    @property
    def flagged(self) -> int:
        """Scored questions annotated with an error, or with a label that says none of them (`UNKNOWN`)."""
        return sum(n for k, n in self.counts.items() if k not in (OK, NOT_ANNOTATED))

    def summary(self) -> str:
        """One line: the clean accuracy and what was left out."""
        errors = ", ".join(f"{k} {n}" for k, n in self.counts.items() if k not in (OK, NOT_ANNOTATED))
        ok, none = self.counts.get(OK, 0), self.counts.get(NOT_ANNOTATED, 0)
        clean = (
            f"clean accuracy (annotated ok) micro {100 * self.clean.micro.acc:.2f} %, macro "
            f"{100 * self.clean.macro.acc:.2f} % on {ok:,} questions"
            if self.clean
            else "no scored question is annotated ok"
        )
        return f"MMLU-Redux: {clean}; {self.flagged:,} flagged ({errors or 'none'}), {none:,} not annotated"


def annotated_scores(results: Sequence[QuestionResult]) -> AnnotatedScores:
    """The counts per annotation (in `LABELS` order) and the accuracies on the `ok` questions."""
    seen = Counter(r.annotation or NOT_ANNOTATED for r in results)
    counts = {k: seen[k] for k in (*LABELS, NOT_ANNOTATED) if seen[k]}
    ok = [r for r in results if r.annotation == OK]
    return AnnotatedScores(counts, aggregate(ok) if ok else None)
