"""The in-process transformers backend: a model loaded by `models.load`, scored by `SCORERS`.

Everything that needs torch sits behind this module (batching by tokens, the prefix cache and
two-part attention, the out-of-memory back-off); it satisfies `backend.Backend` and changes
nothing in how prompts are scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mmlu_track.config import EvalConfig, ScoringConfig
from mmlu_track.eval import models
from mmlu_track.eval.backend import Progress, Score
from mmlu_track.eval.chat_template import render as render_chat
from mmlu_track.eval.chat_template import source as template_source
from mmlu_track.eval.prompts import Messages
from mmlu_track.eval.scoring import SCORERS
from mmlu_track.records.run import ModelInfo


@dataclass(frozen=True)
class InProcess:
    lm: models.LoadedModel

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
        messages: Sequence[Messages] | None = None,  # rendered here already: `texts` is what is scored
    ) -> list[Score]:
        scorer = SCORERS[cfg.method]
        scores = scorer(
            self.lm, texts, cfg, batch_size, progress, prefixes=prefixes, max_tokens=max_tokens,
            answer_lead=answer_lead,
        )  # fmt: skip
        how = SCORED_BY[cfg.method]
        return [replace(s, scored_by=how) for s in scores]

    def close(self) -> None:
        pass  # the weights go with the process (or with the last reference)


SCORED_BY = {"logprob": "logits", "generate": "greedy"}  # the model's own logits; its greedy decoding


def load(cfg: EvalConfig) -> InProcess:
    return InProcess(models.load(cfg))
