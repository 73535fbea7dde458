"""The in-process transformers backend: a model loaded by `models.load`, its requests scored by
`scoring.SCORERS` (a request kind: its scorer) with the run's `Batching`.

Everything that needs torch sits behind this module (batching by tokens, the prefix cache and
two-part attention, the out-of-memory back-off); it satisfies `backend.Backend` and changes
nothing in how prompts are scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mmlu_track.eval import models
from mmlu_track.eval.backend import GenerationRequest, LetterRequest, Progress, Score, Traffic
from mmlu_track.eval.chat_template import render as render_chat
from mmlu_track.eval.chat_template import source as template_source
from mmlu_track.eval.prompts import Messages
from mmlu_track.eval.scoring import SCORERS
from mmlu_track.records.run import ModelInfo
from mmlu_track.settings.config import EvalConfig, ScoringConfig, ScoringMethod


@dataclass(frozen=True)
class Batching:
    """How the in-process backend scores: the scoring settings, the most prompts per forward pass
    (`batch_size`) and, unless None, the most padded tokens per pass (`batch_tokens`)."""

    scoring: ScoringConfig
    batch_size: int
    batch_tokens: int | None

    @classmethod
    def of(cls, cfg: EvalConfig) -> Batching:
        return cls(cfg.scoring, cfg.batch_size, cfg.batch_tokens)


@dataclass(frozen=True)
class InProcess:
    lm: models.LoadedModel
    batching: Batching | None = None  # None: a backend that only tokenizes and renders (tests)

    def _batching(self) -> Batching:
        if self.batching is None:
            raise RuntimeError("an in-process backend without its Batching cannot score (a bug)")
        return self.batching

    @property
    def info(self) -> ModelInfo:
        return self.lm.info

    def encode(self, text: str) -> list[int]:
        return self.lm.encode(text)

    @property
    def chat_template(self) -> str | None:
        return template_source(self.lm.tokenizer)

    def apply_chat_template(self, messages: Messages) -> str:
        return render_chat(self.lm.tokenizer, messages)[0]

    def score_letters(self, requests: Sequence[LetterRequest], progress: Progress) -> list[Score]:
        leads = {r.answer_lead for r in requests}
        if len(leads) > 1:
            raise ValueError(f"one subject's prompts with different answer leads {sorted(leads)} (a bug)")
        return self._scored("logprob", requests, progress, leads.pop() if leads else " ")

    def generate(self, requests: Sequence[GenerationRequest], progress: Progress) -> list[Score]:
        # A chat request's `messages` are rendered already: `text` is what the model reads.
        return self._scored("generate", requests, progress, " ")

    def _scored(
        self,
        method: ScoringMethod,
        requests: Sequence[LetterRequest] | Sequence[GenerationRequest],
        progress: Progress,
        answer_lead: str,
    ) -> list[Score]:
        b = self._batching()
        scores = SCORERS[method](
            self.lm,
            [r.text for r in requests],
            b.scoring,
            b.batch_size,
            progress,
            prefixes=[r.prefix for r in requests],
            max_tokens=b.batch_tokens,
            answer_lead=answer_lead,
        )
        return [replace(s, scored_by=SCORED_BY[method]) for s in scores]

    def traffic(self) -> Traffic:
        return Traffic()  # no server, no requests

    def close(self) -> None:
        pass  # the weights go with the process (or with the last reference)


SCORED_BY = {"logprob": "logits", "generate": "greedy"}  # the model's own logits; its greedy decoding


def load_backend(cfg: EvalConfig) -> InProcess:
    return InProcess(models.load_model(cfg), Batching.of(cfg))
