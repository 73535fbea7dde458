"""A chain-of-thought run's figures beyond accuracy (`scoring=cot`): how many answers each extraction
rule read (`eval.answers.CASCADE`, `none`: no rule read a letter, `beyond`: a letter the question does
not have, `guess`: `scoring.failed=random`'s seeded guess), why each generation ended (`stop` at a stop
string, `end` of sequence, `length`: cut by `scoring.max_new_tokens`) and the tokens generated. Read
from the question results; shown by the console, `runs show`, results.json and MLflow."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmlu_track.records import codec
from mmlu_track.records.results import QuestionResult


@codec.closed
@dataclass(frozen=True)
class Reasoning:
    """Questions per extraction rule and per way a generation ended, and the tokens generated."""

    rules: dict[str, int]  # the rule that read the answer (or none, beyond, guess) -> questions
    finished: dict[str, int]  # stop | end | length -> questions
    tokens: int  # generated, all questions together
    most_tokens: int  # the longest generation

    def to_json(self) -> dict[str, Any]:
        """The figures as JSON-ready values."""
        return codec.dump(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Reasoning:
        """The record `to_json` wrote; `RecordError` naming a field that is missing or not of its type."""
        return codec.load(cls, raw, "reasoning figures")

    def line(self) -> str:
        """One line: the answers each rule read, and the generations the token limit cut."""
        n = sum(self.rules.values())
        read = ", ".join(f"{rule} {count}" for rule, count in self.rules.items())
        cut = self.finished.get("length", 0)
        mean = self.tokens / max(n, 1)
        return (
            f"answers read by: {read} (of {n}); {cut} generation{'s' if cut != 1 else ''} cut by the "
            f"token limit; {mean:.0f} tokens generated on average, {self.most_tokens} at most"
        )


def reasoning(results: Sequence[QuestionResult]) -> Reasoning | None:
    """The figures of a chain-of-thought run's results (None when none was a chain of thought)."""
    cot = [r for r in results if r.extraction is not None]
    if not cot:
        return None
    rules = Counter(r.extraction for r in cot)
    finished = Counter(r.finish or "end" for r in cot)
    tokens = [r.new_tokens or 0 for r in cot]
    return Reasoning(
        rules={k: rules[k] for k in sorted(rules, key=lambda k: (-rules[k], k)) if k is not None},
        finished=dict(sorted(finished.items())),
        tokens=sum(tokens),
        most_tokens=max(tokens),
    )
