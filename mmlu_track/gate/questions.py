"""`gate.questions`: which questions a comparison rests on, and what MMLU-Redux says of the ones
that changed (`records.annotations`; each question's annotation is in its stored row).

- `clean`: only the questions annotated `ok` (a question whose key is wrong, or that has no or
  several correct options, says nothing of a regression). Both runs must have been given the same
  annotation set (its content's fingerprint); the report says how many were left out and why.
- `all`: every question; where the runs carry annotations, the report says how many of the lost
  and of the gained questions MMLU-Redux flags, and names the first of them ("2 of the 5 lost
  questions have a disputed key … : virology 12 (wrong_groundtruth), …").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from mmlu_track.gate.stats import ComparisonError
from mmlu_track.records.annotations import NOT_ANNOTATED, OK, AnnotationSet
from mmlu_track.records.results import QuestionResult
from mmlu_track.records.stored import StoredRun

Results = Sequence[QuestionResult]
NAMED = 5  # disputed lost or gained questions named in the report's line (all: paired_questions.json)


def _annotations(run: StoredRun) -> AnnotationSet | None:
    record = run.record
    return record.start.data.annotations if record else None


def clean_problems(base: StoredRun, cand: StoredRun) -> list[str]:
    """Why the pair cannot be gated on `gate.questions=clean` (empty: it can)."""
    b, c = _annotations(base), _annotations(cand)
    if b is None or c is None:
        side, run = ("baseline", base) if b is None else ("candidate", cand)
        return [
            f"gate.questions=clean needs MMLU-Redux annotations in both runs, and the {side} run "
            f"{run.id[:12]} has none (evaluate it with data.annotations=…, or gate on gate.questions=all)"
        ]
    if b.fingerprint != c.fingerprint:
        return [
            f"annotations differ (baseline {b.source} {b.fingerprint[:12]}, candidate {c.source} "
            f"{c.fingerprint[:12]}): gate.questions=clean needs both runs annotated by the same set"
        ]
    return []


def _counts(labels: Sequence[str | None]) -> str:
    seen = Counter(label or NOT_ANNOTATED for label in labels)
    return ", ".join(f"{k} {n}" for k, n in seen.most_common())


def only_clean(base: Results, cand: Results) -> tuple[list[QuestionResult], list[QuestionResult], str]:
    """Both runs' results on the questions annotated ok, and the note that says what was left out.
    The label is the candidate's row's (the same set in both: `clean_problems`)."""
    keep = {(r.subject, r.index) for r in cand if r.annotation == OK}
    left = [r.annotation for r in cand if (r.subject, r.index) not in keep]
    if not keep:
        raise ComparisonError(
            f"gate.questions=clean: none of the {len(cand):,} questions compared is annotated ok by "
            f"MMLU-Redux ({_counts(left)}): gate on gate.questions=all, or on runs with more questions"
        )
    note = (
        f"gate.questions=clean: {len(keep):,} questions annotated ok by MMLU-Redux compared; "
        f"{len(left):,} of {len(cand):,} left out ({_counts(left) or 'none'})"
    )
    return (
        [r for r in base if (r.subject, r.index) in keep],
        [r for r in cand if (r.subject, r.index) in keep],
        note,
    )


def disputed(base: Results, cand: Results, metric: str) -> list[str]:
    """On all questions: how many of the lost and the gained ones MMLU-Redux flags (its error types)."""
    if not any(r.annotation is not None for r in cand):
        return []
    by_key = {(r.subject, r.index): r for r in base}
    out = []
    for name, lost in (("lost", True), ("gained", False)):
        moved = [
            c for c in cand
            if (b := by_key.get((c.subject, c.index))) is not None
            and b.outcome(metric) != c.outcome(metric) and b.outcome(metric) == lost
        ]  # fmt: skip
        flagged = [c for c in moved if c.annotation not in (None, OK)]
        if flagged:
            named = ", ".join(f"{c.subject} {c.index} ({c.annotation})" for c in flagged[:NAMED])
            more = f" and {len(flagged) - NAMED} more" if len(flagged) > NAMED else ""
            out.append(
                f"{len(flagged)} of the {len(moved)} {name} questions have a disputed key per MMLU-Redux "
                f"({_counts([c.annotation for c in flagged])}): {named}{more} (paired_questions.json "
                "lists each); gate.questions=clean leaves them out"
            )
    return out
