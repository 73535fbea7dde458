"""Rendered prompts as the backend's requests: the one place that picks a request kind by the
scoring method (`logprob`: `LetterRequest`s to `score_letters`; `generate`: `GenerationRequest`s
to `generate`)."""

from __future__ import annotations

from collections.abc import Sequence

from mmlu_track.eval.backend import Backend, GenerationRequest, LetterRequest, Progress, Score
from mmlu_track.eval.prompts import Prompt
from mmlu_track.settings.config import ScoringMethod


def ask(
    lm: Backend, rendered: Sequence[Prompt], method: ScoringMethod, answer_lead: str, progress: Progress
) -> list[Score]:
    """One subject's prompts scored by `method`, in order. `answer_lead`: what precedes a letter
    (`prompts.Style.answer_lead`: " " after a raw prompt, "" after a chat generation prompt)."""
    if method == "logprob":
        requests = [LetterRequest(p.text, p.prefix, answer_lead, len(p.question.choices)) for p in rendered]
        return lm.score_letters(requests, progress)
    asked = [
        GenerationRequest(p.text, p.prefix, p.messages or None, len(p.question.choices)) for p in rendered
    ]
    return lm.generate(asked, progress)


def per_question(progress: Progress, questions: int, prompts: int) -> Progress:
    """`progress` counted in questions where `questions` are asked as `prompts` prompts in all (a
    circular run's rotations: 4 a question for MMLU, one per option for MMLU-Pro): after d prompts,
    d·questions/prompts questions (rounded down) are reported done."""
    if prompts == questions:
        return progress
    done = 0

    def step(n: int) -> None:
        nonlocal done
        before = done * questions // prompts
        done += n
        if (now := done * questions // prompts) > before:
            progress(now - before)

    return step
