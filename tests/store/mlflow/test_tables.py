"""store/mlflow/tables.py: the per-question tables a reviewer filters in MLflow: an evaluation's
questions by subject and index with what each run recorded, and a comparison's paired questions
with what changed, the changed ones first."""

from __future__ import annotations

import pytest

from mmlu_track.records.results import QuestionResult, RotatedAnswer
from mmlu_track.store.mlflow.tables import change, paired_columns, question_columns

LP = (-0.12344, -2.0, -3.0, -4.0)


def _qr(subject: str, i: int, prediction: int | None, gold: int = 1, **more: object) -> QuestionResult:
    return QuestionResult(subject, i, "h", 0, 1, False, LP, None, prediction, gold, None, **more)  # type: ignore[arg-type]


def test_an_evaluations_questions_with_what_each_recorded() -> None:
    flagged = _qr("anatomy", 2, None, annotation="wrong_groundtruth")
    rows = [_qr("virology", 0, 1), flagged, _qr("anatomy", 1, 3)]
    docs = {("anatomy", 1): {"question": "Which bone?", "choices": ["a", "b", "c", "d"]}}
    table = question_columns(rows, docs)
    assert table["subject"] == ["anatomy", "anatomy", "virology"]
    assert table["index"] == [1, 2, 0]
    assert table["question"] == ["Which bone?", "", ""]
    assert table["choices"][0] == "A. a\nB. b\nC. c\nD. d"
    assert (table["gold"], table["prediction"], table["correct"]) == (
        ["B", "B", "B"], ["D", "", "B"], [False, False, True],
    )  # fmt: skip
    assert table["annotation"] == [None, "wrong_groundtruth", None]
    assert table["logprob_A"] == [-0.1234] * 3
    assert "generated" not in table
    assert "consistent" not in table
    assert "question" not in question_columns(rows)  # no data at hand: no text


def test_a_comparisons_paired_questions_changed_first() -> None:
    base = [_qr("anatomy", 0, 1), _qr("anatomy", 1, 2), _qr("anatomy", 2, 1), _qr("anatomy", 3, 0)]
    cand = [_qr("anatomy", 0, 1), _qr("anatomy", 1, 1), _qr("anatomy", 2, 0), _qr("anatomy", 3, 2)]
    assert [change(b, c) for b, c in zip(base, cand, strict=True)] == ["", "gained", "lost", "other answer"]
    table = paired_columns(base, cand)
    assert table["change"] == ["gained", "lost", "other answer", ""]
    assert table["index"] == [1, 2, 3, 0]
    assert (table["baseline"], table["candidate"]) == (["C", "B", "A", "B"], ["B", "A", "C", "B"])
    assert table["baseline_correct"] == [False, True, False, True]
    assert "annotation" not in table
    assert "question" not in table
    # On circular accuracy, a question right as given but wrong in one rotation is lost.
    right = _qr("anatomy", 0, 1, rotations=(RotatedAnswer(0), RotatedAnswer(3), RotatedAnswer(2)))
    lost = _qr("anatomy", 0, 1, rotations=(RotatedAnswer(1), RotatedAnswer(3), RotatedAnswer(2)))
    assert change(right, lost, "circular") == "lost"
    assert paired_columns([right], [lost], "circular")["candidate_correct"] == [False]
    with pytest.raises(KeyError):
        paired_columns(base[:1], cand)  # a candidate question the baseline did not answer
