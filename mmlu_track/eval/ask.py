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
        return lm.score_letters([LetterRequest(p.text, p.prefix, answer_lead) for p in rendered], progress)
    return lm.generate([GenerationRequest(p.text, p.prefix, p.messages or None) for p in rendered], progress)


def per_question(progress: Progress, prompts_each: int) -> Progress:
    """`progress` counted in questions where each is asked as `prompts_each` prompts (a circular
    run's rotations)."""
    if prompts_each == 1:
        return progress
    done = 0

    def step(n: int) -> None:
        nonlocal done
        before = done // prompts_each
        done += n
        if (now := done // prompts_each) > before:
            progress(now - before)

    return step
