"""The model-backend seam: what the plan, the scorers' callers and the pipeline may ask of a model.

A `Backend` tokenizes (prompt fitting, the letter-token check) and answers one subject's requests
of one kind — `score_letters` (`LetterRequest`s, logprob scoring) or `generate`
(`GenerationRequest`s) — with one `Score` per request in order; `info` is the `ModelInfo` that
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

from mmlu_track.eval.prompts import Messages
from mmlu_track.records.run import ModelInfo
from mmlu_track.settings.subjects import letters
from mmlu_track.support.errors import MmluTrackError

Progress = Callable[[int], None]


class ModelError(MmluTrackError):
    """A model that cannot be loaded or served as configured (one line for the user)."""


class PromptError(ModelError):
    """A backend's answer for one prompt cannot be scored exactly (never a guessed score instead).
    `position`: the prompt's place in the requests, set by the backend; the caller names the
    question."""

    position: int | None = None


@dataclass(frozen=True)
class Score:
    """The raw outcome for one prompt. `prediction` is None for an invalid generation.

    `generated` (generation scoring) is the decided part of the greedy continuation: its tokens up
    to the one that settles the answer (see `generate.decided`), not all `max_new_tokens`."""

    prediction: int | None
    logprobs: tuple[float, ...] | None = None  # one per option of the question, A first
    generated: str | None = None
    n_tokens: int = 0
    truncated: bool = False
    multi_pass: bool = False
    # Tokens run through the model for it: a shared prefix counts on one question, decode steps on theirs.
    forwarded: int = 0
    prefix_fallback: bool = False  # the prefix cache was on but this prompt's tokens did not extend it
    # How the backend got it (`QuestionResult.scored_by`): logits, greedy, top_logprobs, echo, completion.
    scored_by: str | None = None
    # A chain of thought (`extract=cascade`): the rule that read its answer (`answers.CASCADE`), the
    # tokens generated, and why it ended: `stop` (a stop string), `end` (end of sequence), `length`.
    extraction: str | None = None
    new_tokens: int | None = None
    finish: str | None = None


@dataclass(frozen=True)
class LetterRequest:
    """`logprob` scoring: the log-probs of the question's answer letters (A-D for MMLU's four
    options, up to A-J) as continuations of a prompt."""

    text: str  # the prompt as the model reads it (a chat prompt: rendered by the model's template)
    prefix: str = ""  # its start that other prompts share (the in-process prefix cache runs it once)
    answer_lead: str = " "  # before a letter: " " after a raw prompt, "" after a chat generation prompt
    options: int = 4  # how many choices the question has: one letter each

    @property
    def continuations(self) -> tuple[str, ...]:
        """The scored continuations, `answer_lead` then each of the question's letters, in order."""
        return tuple(f"{self.answer_lead}{letter}" for letter in letters(self.options))


@dataclass(frozen=True)
class GenerationRequest:
    """`generate` scoring: a greedy continuation of a prompt, up to where its answer is decided."""

    text: str  # the prompt as the model reads it
    prefix: str = ""  # its start that other prompts share (the in-process prefix cache runs it once)
    messages: Messages | None = None  # a chat prompt's messages: a server generates through its template
    options: int = 4  # how many choices the question has: the letters an answer may be


@dataclass(frozen=True)
class Traffic:
    """A served model's requests so far: sent (retries included), abandoned at `model.timeout_s`
    (the server may still have computed them) and the seconds spent waiting on those."""

    requests: int = 0
    abandoned: int = 0
    abandoned_s: float = 0.0


class Backend(Protocol):
    """A loaded (or reachable) model, as the layers above the seam see it. It is made complete
    from the evaluation's settings (scoring, batching, the server's limits): a request carries only
    what differs from prompt to prompt, and each backend reads the fields it uses (the in-process
    one a request's `prefix`, a server a chat request's `messages`)."""

    @property
    def info(self) -> ModelInfo:
        """The model as the run record and its identity describe it."""
        ...

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

    def score_letters(self, requests: Sequence[LetterRequest], progress: Progress) -> list[Score]:
        """One subject's prompts' letter log-probs, in order; `progress(n)` after each n scored."""
        ...

    def generate(self, requests: Sequence[GenerationRequest], progress: Progress) -> list[Score]:
        """One subject's prompts' greedy answers, in order; `progress(n)` after each n scored."""
        ...

    def traffic(self) -> Traffic:
        """The requests sent so far (a served model's; in-process, none)."""
        ...

    def close(self) -> None:
        """Let go of what the backend holds open (a server's connections); the run is over."""
        ...
