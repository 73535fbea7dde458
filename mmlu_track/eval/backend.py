"""The model-backend seam: what the plan, the scorers' callers and the pipeline may ask of a model.

A `Backend` tokenizes (prompt fitting, the letter-token check) and scores one subject's prompts
by a scoring method, returning one `Score` per prompt in order; `info` is the `ModelInfo` that
goes into the run record and its identity. How it computes is its own business: the in-process
transformers backend (`in_process.py`: batching by tokens, the prefix cache, two-part attention,
the out-of-memory back-off) is one; a served model is another. `load.BACKENDS` maps a model's
`source` to the function that loads its backend.

This module is the seam itself: no torch, no transformers, no HTTP. What is above it (plan,
pipeline) imports only this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from mmlu_track.config import ScoringConfig
from mmlu_track.eval.prompts import Messages
from mmlu_track.records.run import ModelInfo

Progress = Callable[[int], None]


class ModelError(RuntimeError):
    """A model that cannot be loaded or served as configured (one line for the user)."""


class PromptError(ModelError):
    """A backend's answer for one prompt cannot be scored exactly (never a guessed score instead).
    `position`: the prompt's place in `score`'s texts, set by the backend; the caller names the
    question."""

    position: int | None = None


@dataclass(frozen=True)
class Score:
    """The raw outcome for one prompt. `prediction` is None for an invalid generation.

    `generated` (generation scoring) is the decided part of the greedy continuation: its tokens up
    to the one that settles the answer (see `generate.decided`), not all `max_new_tokens`."""

    prediction: int | None
    logprobs: tuple[float, float, float, float] | None = None
    generated: str | None = None
    n_tokens: int = 0
    truncated: bool = False
    multi_pass: bool = False
    # Tokens run through the model for it: a shared prefix counts on one question, decode steps on theirs.
    forwarded: int = 0
    prefix_fallback: bool = False  # the prefix cache was on but this prompt's tokens did not extend it
    # How the backend got it (`QuestionResult.scored_by`): logits, greedy, top_logprobs, echo, completion.
    scored_by: str | None = None


class Backend(Protocol):
    """A loaded (or reachable) model, as the layers above the seam see it."""

    @property
    def info(self) -> ModelInfo: ...

    def encode(self, text: str) -> list[int]:
        """The token ids the model would see for `text` (its BOS token first where it adds one)."""
        ...

    @property
    def chat_template(self) -> str | None:
        """The model's chat template (its source text), None when it has none."""
        ...

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        """Chat messages rendered by the model's template, with its generation prompt."""
        ...

    def score(
        self,
        texts: Sequence[str],
        cfg: ScoringConfig,
        batch_size: int,
        progress: Progress,
        *,
        prefixes: Sequence[str] | None = None,
        max_tokens: int | None = None,
        answer_lead: str = " ",
        messages: Sequence[Messages] | None = None,
    ) -> list[Score]:
        """One subject's prompts scored by `cfg.method`, in order; `prefixes[i]` is the start text
        prompt i shares with others; `answer_lead` what precedes an answer letter (`" "` after a
        raw prompt, `""` after a chat template's generation prompt); `messages[i]` the chat
        messages text i renders (chat prompts: a server may apply its own template to them). A batch
        holds at most `batch_size` prompts and, unless `max_tokens` is None, at most `max_tokens`
        padded tokens (never fewer than one prompt); `progress(n)` after each n prompts scored."""
        ...

    def close(self) -> None:
        """Let go of what the backend holds open (a server's connections); the run is over."""
        ...
