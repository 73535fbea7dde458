"""gate/stats.py: a p-value of exactly 0 (a total regression) is evidence, never read as 1."""

from __future__ import annotations

from mmlu_track.gate.stats import compare, pair, untested_as_one
from mmlu_track.records.results import QuestionResult
from mmlu_track.settings.config import GateConfig


def _results(correct: list[bool], subject: str = "anatomy") -> list[QuestionResult]:
    return [
        QuestionResult(subject, i, "h", 5, 10, False, (-1.0, -2.0, -2.0, -2.0), None, 0 if ok else 1, 0, 1.0)
        for i, ok in enumerate(correct)
    ]


def test_a_total_regression_has_p_zero_and_is_flagged() -> None:
    """1,100 questions all lost: the exact one-sided p is 0.5^1100, which underflows to 0.0; `p or
    1.0` read it as 1 and the subject's corrected p as 1: not flagged."""
    n = 1100
    comp = compare(pair(_results([True] * n), _results([False] * n)), GateConfig(name="test"))
    assert comp.micro.p_regression == 0.0
    (subject,) = comp.subjects
    assert subject.p_regression == 0.0
    assert subject.p_regression_adj == 0.0
    assert subject.flagged
    assert untested_as_one(0.0) == 0.0
    assert untested_as_one(None) == 1.0
