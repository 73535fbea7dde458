"""gate/outcome.py: a decided comparison says how it was decided (the fixed-sample gate, a few-shot
gap, or the sequential gate with its own section), and the questions' text is read only where
MLflow's table shows it."""

from __future__ import annotations

import dataclasses

from mmlu_track.gate.outcome import Outcome, questions_text

from .conftest import Decide


def test_an_outcome_says_how_it_was_decided(decide: Decide) -> None:
    _, outcome = decide({"anatomy": [True, False] * 10}, {"anatomy": [True, False] * 10})
    assert isinstance(outcome, Outcome)
    assert (outcome.mode, outcome.sequential) == ("gate", None)
    assert outcome.results is not None
    assert [len(side) for side in outcome.results] == [20, 20]
    section = {"sequential": {"decision": "pass", "look": 3, "looks": 20}}
    sequential = dataclasses.replace(outcome, extra=(section, {"looks_used": 3.0}))
    assert (sequential.mode, sequential.sequential) == ("sequential", section["sequential"])
    _, gap = decide({"anatomy": [True] * 4}, {"anatomy": [False] * 4}, mode="fewshot_gap", cand_k=0)
    assert (gap.mode, gap.verdict.status) == ("fewshot_gap", "analysis")


def test_the_questions_text_is_read_only_for_mlflows_table(decide: Decide) -> None:
    _, outcome = decide({"anatomy": [True]}, {"anatomy": [False]})
    docs = {("anatomy", 0): {"question": "Which bone?", "choices": ["a", "b", "c", "d"]}}
    asked: list[str] = []

    def docs_for(record: object) -> dict[tuple[str, int], dict[str, object]]:
        asked.append(getattr(record, "run_id", "?"))
        return docs

    assert questions_text(docs_for, outcome.base, mlflow=False) is None
    assert asked == []  # the data is not read again for nothing
    assert questions_text(None, outcome.base, mlflow=True) is None
    assert questions_text(docs_for, outcome.base, mlflow=True) == docs
    assert asked == [outcome.base.id]
