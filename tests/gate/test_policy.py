"""gate/policy.py: the verdict of a comparison (regression when a drop is shown, pass when
non-inferiority is and no drop, inconclusive when neither; warn-only exits 0), a few-shot gap's
analysis, which runs are comparable, and a pair asked with different prompts refused."""

from __future__ import annotations

import pytest

from mmlu_track.gate.policy import analysis, decide, flagged_drop, incomparable, same_prompts
from mmlu_track.gate.stats import ComparisonError, compare, pair
from mmlu_track.records.results import QuestionResult
from mmlu_track.settings.config import GateConfig
from mmlu_track.support.errors import EXIT_PASS, EXIT_REGRESSION

from .conftest import Decide

GATE = GateConfig("default", bootstrap_resamples=0)


def _results(correct: list[bool], subject: str = "anatomy", shots: int = 5) -> list[QuestionResult]:
    return [
        QuestionResult(subject, i, f"h{shots}", shots, 10, False, None, "A", 0 if ok else 1, 0, None)
        for i, ok in enumerate(correct)
    ]


def _decided(base: list[bool], cand: list[bool], gate: GateConfig = GATE) -> tuple[str, int, str]:
    verdict = decide(compare(pair(_results(base), _results(cand)), gate), gate)
    return verdict.status, verdict.exit_code, verdict.headline


def test_the_verdict_follows_what_the_data_shows() -> None:
    same = [True, False, True, True] * 500  # 2,000 questions, nothing changed: non-inferior
    status, code, headline = _decided(same, same)
    assert (status, code) == ("pass", EXIT_PASS)
    assert headline == "non-inferiority shown at δ = 1.0 pts, no drop shown"
    dropped = [True] * 300 + [False] * 100
    status, code, headline = _decided(dropped, [False] * 400)
    assert (status, code) == ("regression", EXIT_REGRESSION)
    assert headline.startswith("significant overall drop: Δ micro -75.00 pts, 300 lost vs 0 gained")
    status, code, headline = _decided([True, False] * 10, [True, False] * 10)  # 20 questions
    assert (status, code) == ("inconclusive", EXIT_REGRESSION)
    assert headline.startswith("too few questions to tell")
    warn = GateConfig("warn_only", warn_only=True, bootstrap_resamples=0)
    assert _decided(dropped, [False] * 400, warn)[:2] == ("regression", EXIT_PASS)


def test_a_flagged_subject_fails_only_a_policy_that_fails_on_them() -> None:
    base = _results([True] * 60, "anatomy") + _results([True, False] * 500, "virology")
    cand = _results([False] * 60, "anatomy") + _results([True, False] * 500, "virology")
    comp = compare(pair(base, cand), GATE)
    assert [s.name for s in comp.subjects if s.flagged] == ["anatomy"]
    assert flagged_drop(comp, GATE) is None
    strict = GateConfig("strict", fail_on_flagged_subjects=True, bootstrap_resamples=0)
    assert flagged_drop(comp, strict) == "1 subject(s) regressed significantly: anatomy"
    gap = analysis(comp)
    assert (gap.status, gap.exit_code) == ("analysis", EXIT_PASS)
    assert gap.headline.endswith("0 subject(s) gain and 1 lose significantly")


def test_runs_of_other_shots_or_choice_orders_are_not_comparable(decide: Decide) -> None:
    _, outcome = decide({"anatomy": [True, False]}, {"anatomy": [True, True]}, mode="fewshot_gap", cand_k=0)
    problems = incomparable(outcome.base, outcome.cand, "gate")
    assert any(p.startswith("k differs") and p.endswith("add mode=fewshot_gap") for p in problems)
    assert incomparable(outcome.base, outcome.cand, "fewshot_gap") == []
    assert incomparable(outcome.base, outcome.base, "fewshot_gap") == [
        "mode=fewshot_gap needs two different k, both runs have k=5"
    ]
    circular = incomparable(outcome.base, outcome.base, "gate", "circular")
    assert len(circular) == 2
    assert circular[0].startswith("choice order differs: gate.metric=circular needs both runs")


def test_questions_asked_with_other_prompts_are_refused() -> None:
    same_prompts(_results([True, False]), _results([False, False]))  # the same prompts: no complaint
    with pytest.raises(ComparisonError) as refused:
        same_prompts(_results([True, False], shots=5), _results([True, False], shots=3))
    assert str(refused.value) == (
        "runs are not comparable: 2 of 2 questions were asked with different prompts (e.g. anatomy "
        "question 0: baseline 5 shots, candidate 3); shots were dropped to fit a shorter context: give "
        "both the same max_length"
    )
