"""records/reasoning.py: a chain-of-thought run's answers per extraction rule, the generations the
token limit cut and the tokens generated, from its question results; None for any other run."""

from __future__ import annotations

import dataclasses

import pytest

from mmlu_track.records.codec import RecordError
from mmlu_track.records.reasoning import Reasoning, reasoning
from mmlu_track.records.results import QuestionResult

BASE = QuestionResult("math", 0, "h", 5, 100, False, None, "x", 1, 1, None, options=10)


def _cot(index: int, rule: str, tokens: int, finish: str) -> QuestionResult:
    return dataclasses.replace(BASE, index=index, extraction=rule, new_tokens=tokens, finish=finish)


def test_the_figures_count_rules_ends_and_tokens() -> None:
    results = [_cot(0, "answer is", 40, "stop"), _cot(1, "answer is", 60, "stop"),
               _cot(2, "none", 256, "length"), _cot(3, "last letter", 20, "end")]  # fmt: skip
    got = reasoning(results)
    assert got == Reasoning(
        rules={"answer is": 2, "last letter": 1, "none": 1},
        finished={"end": 1, "length": 1, "stop": 2},
        tokens=376,
        most_tokens=256,
    )
    assert got.line() == (
        "answers read by: answer is 2, last letter 1, none 1 (of 4); 1 generation cut by the token "
        "limit; 94 tokens generated on average, 256 at most"
    )
    assert Reasoning.from_json(got.to_json()) == got
    assert reasoning([BASE]) is None  # not a chain of thought


def test_a_stored_record_of_the_wrong_type_is_refused_naming_the_field() -> None:
    doc = Reasoning({"none": 1}, {"length": 1}, 9, 9).to_json()
    with pytest.raises(RecordError, match="tokens"):
        Reasoning.from_json({**doc, "tokens": "nine"})
