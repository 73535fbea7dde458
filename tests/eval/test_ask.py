"""eval/ask.py: the scoring method picks the request kind (log-probs of the letters, or a greedy
generation), each prompt asked as it was rendered, in order; progress counted in questions where
each is asked as several prompts."""

from __future__ import annotations

from typing import Any

from mmlu_track.eval.ask import ask, per_question
from mmlu_track.eval.batching import Batching
from mmlu_track.eval.data import Question
from mmlu_track.eval.in_process import InProcess
from mmlu_track.eval.prompts import Prompt
from mmlu_track.settings.config import ScoringConfig

from .conftest import generate_scores, logprob_scores

PREFIX = "The following are multiple choice questions.\n\n"
TEXTS = [
    PREFIX + "What is 2 + 2?\nA. 3\nB. 4\nC. 5\nD. 6\nAnswer:",
    PREFIX + "Which is a planet?\nA. Mars\nB. Moon\nC. Sun\nD. Vega\nAnswer:",
]


def _prompts() -> list[Prompt]:
    q = Question("elementary_mathematics", "test", 0, "?", ("3", "4", "5", "6"), 1)
    return [Prompt(q, text, 0, PREFIX) for text in TEXTS]


def test_each_method_asks_its_own_request_kind_of_the_backend(tiny_lm: Any) -> None:
    cfg = ScoringConfig("logprob", max_new_tokens=4)
    backend = InProcess(tiny_lm, Batching(cfg, batch_size=2))
    counted: list[int] = []
    letters = ask(backend, _prompts(), "logprob", " ", counted.append)
    assert sum(counted) == 2
    assert [s.scored_by for s in letters] == ["logits", "logits"]
    direct = logprob_scores(tiny_lm, TEXTS, cfg, 2, lambda _: None, prefixes=[PREFIX, PREFIX])
    assert [s.logprobs for s in letters] == [s.logprobs for s in direct]
    assert all(s.generated is None for s in letters)

    generated = ask(backend, _prompts(), "generate", " ", lambda _: None)
    assert [s.scored_by for s in generated] == ["greedy", "greedy"]
    assert all(s.logprobs is None for s in generated)
    plain = generate_scores(tiny_lm, TEXTS, cfg, 2, lambda _: None, prefixes=[PREFIX, PREFIX])
    assert [s.generated for s in generated] == [s.generated for s in plain]


def test_progress_counts_questions_when_each_is_asked_as_several_prompts() -> None:
    seen: list[int] = []
    assert per_question(seen.append, 3, 3) == seen.append  # one prompt a question: as given
    step = per_question(seen.append, 3, 12)  # a circular run: 4 rotations a question
    for n in (3, 1, 2, 6):
        step(n)
    assert seen == [1, 2]  # 4 prompts: one question; 12: three
    assert sum(seen) == 3
    seen.clear()
    step = per_question(seen.append, 2, 13)  # MMLU-Pro: a 3-option and a 10-option question
    for _ in range(13):
        step(1)
    assert seen == [1, 1]  # the second done only when every prompt is
