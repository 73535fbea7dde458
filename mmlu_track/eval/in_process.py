"""The in-process transformers backend: a model loaded by `models.load`, its requests scored by
`scoring.SCORERS` (a request kind: its scorer) with the run's `Batching`.

Everything that needs torch sits behind this module (batching by tokens, the prefix cache and
two-part attention, the out-of-memory back-off); it satisfies `backend.Backend` and changes
nothing in how prompts are scored.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from mmlu_track.eval import models
from mmlu_track.eval.backend import GenerationRequest, LetterRequest, Progress, Score, Traffic
from mmlu_track.eval.batching import Batching
from mmlu_track.eval.chat_template import render as render_chat
from mmlu_track.eval.chat_template import source as template_source
from mmlu_track.eval.fingerprint import folder_sha256
from mmlu_track.eval.pins import Pinned
from mmlu_track.eval.prompts import Messages
from mmlu_track.eval.scoring import SCORERS
from mmlu_track.eval.threads import Governor
from mmlu_track.records.run import ModelInfo
from mmlu_track.settings.config import EvalConfig, ScoringMethod

__all__ = ["SCORED_BY", "Batching", "InProcess", "load_backend"]


@dataclass(frozen=True)
class InProcess:
    """The `Backend` of a model loaded in this process: its requests scored by `SCORERS` with
    `batching`; without a `batching` it only tokenizes and renders, and scoring raises `RuntimeError`."""

    lm: models.LoadedModel
    batching: Batching | None = None  # None: a backend that only tokenizes and renders (tests)
    governor: Governor | None = None  # threads=auto: fewer threads while other work is busy

    def _batching(self) -> Batching:
        if self.batching is None:
            raise RuntimeError("an in-process backend without its Batching cannot score (a bug)")
        return self.batching

    @property
    def info(self) -> ModelInfo:
        """The loaded model's `ModelInfo`, as `models.load_model` made it."""
        return self.lm.info

    def encode(self, text: str) -> list[int]:
        """The token ids of `text`, its BOS token first exactly when `info.add_bos` is true."""
        return self.lm.encode(text)

    @property
    def chat_template(self) -> str | None:
        """The tokenizer's chat template (its Jinja source), None when it has none."""
        return template_source(self.lm.tokenizer)

    def apply_chat_template(self, messages: Messages) -> str:
        """`messages` rendered by the tokenizer's template with its generation prompt (a system
        message folded into the first user message where the template refuses one)."""
        return render_chat(self.lm.tokenizer, messages)[0]

    def score_letters(self, requests: Sequence[LetterRequest], progress: Progress) -> list[Score]:
        """One `Score` per request, in order, from the model's logits of the letters (`scored_by` logits)."""
        return self._scored("logprob", requests, progress)

    def generate(self, requests: Sequence[GenerationRequest], progress: Progress) -> list[Score]:
        """One `Score` per request, in order, from the model's greedy decoding (`scored_by` greedy)."""
        return self._scored("generate", requests, progress)

    def _scored(
        self,
        method: ScoringMethod,
        requests: Sequence[LetterRequest] | Sequence[GenerationRequest],
        progress: Progress,
    ) -> list[Score]:
        governor = self.governor
        if governor is not None:  # between batches: a change of threads never splits one
            governor.check()
            progress = _checking(progress, governor)
        scores = SCORERS[method](self.lm, requests, self._batching(), progress)
        return [replace(s, scored_by=SCORED_BY[method]) for s in scores]

    def traffic(self) -> Traffic:
        """Always an empty `Traffic`: no server, no requests."""
        return Traffic()  # no server, no requests

    def close(self) -> None:
        """Nothing to close: the weights go with the process (or with the last reference)."""
        pass  # the weights go with the process (or with the last reference)


def _checking(progress: Progress, governor: Governor) -> Progress:
    def advanced(n: int) -> None:
        progress(n)
        governor.check()

    return advanced


_COMMIT = re.compile(r"[0-9a-f]{40}")  # a hub revision that is a commit, not a branch
SCORED_BY = {"logprob": "logits", "generate": "greedy"}  # the model's own logits; its greedy decoding


def load_backend(cfg: EvalConfig, threads: int | None = None) -> InProcess:
    """The configured model loaded in this process (torch's threads set to `threads`, as resolved,
    else to `threads=N`; seeded with the run's seed), ready to score with the run's `Batching`;
    `ModelError` when it cannot be loaded."""
    count = threads if threads is not None else cfg.threads
    _set_threads(count)
    # `auto` is a ceiling: watched from before the load, so the first batches already see the others
    governor = Governor(count, _set_intra_op) if cfg.threads == "auto" and isinstance(count, int) else None
    return InProcess(models.load_model(cfg), Batching.of(cfg), governor)


def pinned(run: EvalConfig) -> Pinned | str:
    """The weights `run` would load, without loading them (`eval.pins`); else a sentence saying why
    they are known only once loaded (a hub model at a branch)."""
    cfg = run.model
    dtype = models.resolve_dtype(run.dtype, models.resolve_device(run.device))
    cache = Path(run.cache_dir).expanduser()
    if cfg.source == "tiny":
        return Pinned(f"tiny(seed={cfg.tiny_seed})", None, None, dtype)
    if cfg.source == "gguf":
        _, path, sha = models.gguf_cache(cfg, cache)
        return Pinned(str(path), None, sha, dtype)
    where = str(cfg.name_or_path)
    local = Path(where).expanduser()
    if local.is_dir():
        return Pinned(str(local), None, folder_sha256(local, cache), dtype)
    if cfg.revision and _COMMIT.fullmatch(cfg.revision):
        return Pinned(where, cfg.revision, None, dtype)
    return f"a hub model at {cfg.revision or 'its default branch'}: its commit is known once loaded"


def _set_intra_op(count: int) -> None:
    """Set torch's intra-op threads (the inter-op pool is fixed once started)."""
    import torch

    torch.set_num_threads(count)


def _set_threads(count: int | str) -> None:
    """Set torch's intra- and inter-op threads (`auto` is resolved before: `pipeline.resolve`); the inter-op
    pool only once per process: torch refuses a second setting once it has started."""
    import torch

    if isinstance(count, int):
        torch.set_num_threads(count)
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(count)
