"""gate/questions.py: `gate.questions=clean` compares only the questions MMLU-Redux annotates ok and
says what it left out; on all questions the report names the lost and gained ones whose key is
disputed; a pair without annotations cannot be gated on clean questions."""

from __future__ import annotations

import pytest

from mmlu_track.gate.questions import clean_problems, disputed, only_clean
from mmlu_track.gate.stats import ComparisonError
from mmlu_track.records.results import QuestionResult

from .conftest import Decide


def _qr(i: int, ok: bool, annotation: str | None) -> QuestionResult:
    chosen = 0 if ok else 1  # the gold answer is A
    return QuestionResult("virology", i, "h", 0, 1, False, None, "A", chosen, 0, None, annotation=annotation)


LABELS = ["ok", "wrong_groundtruth", "ok", "no_correct_answer", None, "ok"]
BASE = [_qr(i, True, a) for i, a in enumerate(LABELS)]
CAND = [_qr(i, i % 2 == 0, a) for i, a in enumerate(LABELS)]  # lost 1, 3 and 5


def test_clean_questions_are_the_ones_annotated_ok_and_the_rest_is_counted() -> None:
    base, cand, note = only_clean(BASE, CAND)
    assert [r.index for r in base] == [r.index for r in cand] == [0, 2, 5]
    assert note == (
        "gate.questions=clean: 3 questions annotated ok by MMLU-Redux compared; 3 of 6 left out "
        "(wrong_groundtruth 1, no_correct_answer 1, not annotated 1)"
    )
    with pytest.raises(ComparisonError, match="none of the 2 questions compared is annotated ok"):
        only_clean(BASE[1:2], [CAND[1], CAND[4]])


def test_on_all_questions_the_disputed_lost_ones_are_named() -> None:
    (line,) = disputed(BASE, CAND, "accuracy")
    assert line.startswith(
        "2 of the 3 lost questions have a disputed key per MMLU-Redux (wrong_groundtruth 1, "
        "no_correct_answer 1): virology 1 (wrong_groundtruth), virology 3 (no_correct_answer)"
    )
    unannotated = [QuestionResult(**{**r.__dict__, "annotation": None}) for r in CAND]
    assert disputed(BASE, unannotated, "accuracy") == []  # a run given no annotations: nothing said


def test_runs_without_annotations_cannot_be_gated_on_clean_questions(decide: Decide) -> None:
    _, outcome = decide({"anatomy": [True]}, {"anatomy": [False]})
    (problem,) = clean_problems(outcome.base, outcome.cand)
    assert problem.startswith("gate.questions=clean needs MMLU-Redux annotations in both runs, and the ")
    assert f"baseline run {outcome.base.id[:12]} has none" in problem
