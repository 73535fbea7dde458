"""`model=fake`: a model with no weights and no torch, for runs where the model is not the point.

For the pipeline's, the store's, the gate's and the commands' tests. It answers as a backend does,
deterministically from its seed (`model.tiny_seed`) and the text it is given, so the same prompt gets
the same answer in every run, batch and shard, and another prompt another one:

- letters: each continuation's value is drawn from sha256(seed, dtype, prompt, continuation), then
  normalised over the question's letters (a log-softmax: finite, at most 0, summing to 1 as
  probabilities), as a model's letter log-probs over the letters alone;
- generations: a letter drawn the same way, written as the extraction expects it (its first
  character, a pattern's "The answer is (X)", a chain of thought ending "the answer is (X)"), an
  invalid answer now and then (about one in twelve), cut at `scoring.stop` as a real generation is.

Each question takes `model.fake_seconds_per_question` (0 by default): a run long enough for a test
to interrupt it mid-run, without a model's compute.

A dtype other than float32 moves every value a little (as lower precision moves a real model's), so
a noise measurement or a gate between dtypes sees answers flip. Tokens are UTF-8 bytes (one per byte,
no BOS token); its chat template is a plain one of its own, rendered without Jinja.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence

from mmlu_track.eval.answers import argmax, extract, per_letter, read_answer
from mmlu_track.eval.backend import GenerationRequest, LetterRequest, Progress, Score, Traffic
from mmlu_track.eval.pins import Pinned
from mmlu_track.records.run import ModelInfo
from mmlu_track.settings.config import EvalConfig
from mmlu_track.settings.subjects import letters

MAX_LENGTH = 32_768  # tokens (bytes): every MMLU and MMLU-Pro prompt fits with its shots
CHAT_TEMPLATE = (  # the source its template hash is taken of; `apply_chat_template` renders it
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}<|assistant|>\n"
)
INVALID_EVERY = 12  # about one generation in this many answers no letter


def pinned(cfg: EvalConfig) -> Pinned:
    """Its weights as a run's identity knows them: its seed, and the dtype it is said to run in."""
    return Pinned(_location(cfg), None, None, _dtype(cfg))


def _location(cfg: EvalConfig) -> str:
    return f"fake(seed={cfg.model.tiny_seed})"


def _dtype(cfg: EvalConfig) -> str:
    return "float32" if cfg.dtype == "auto" else cfg.dtype


def load_backend(cfg: EvalConfig, threads: int | None = None) -> FakeBackend:
    """The fake model of `cfg` (`threads` has nothing to spread)."""
    return FakeBackend(cfg)


class FakeBackend:
    """A `backend.Backend` that computes nothing (module docstring)."""

    def __init__(self, cfg: EvalConfig) -> None:
        """The model for the run's settings: its seed, dtype, context and scoring."""
        self.cfg = cfg
        self._info = ModelInfo(
            name=cfg.model.name, source="fake", location=_location(cfg), revision=None, weights_sha256=None,
            dtype=_dtype(cfg), device="cpu", max_length=cfg.max_length or MAX_LENGTH, add_bos=False,
            vocab_size=256, n_parameters=0,
        )  # fmt: skip

    @property
    def info(self) -> ModelInfo:
        """The model as its runs record it."""
        return self._info

    def encode(self, text: str) -> list[int]:
        """Its tokens: the text's UTF-8 bytes."""
        return list(text.encode("utf-8"))

    @property
    def chat_template(self) -> str:
        """Its own plain chat template's source."""
        return CHAT_TEMPLATE

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        """The messages as `CHAT_TEMPLATE` renders them, with the generation prompt."""
        return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"

    def score_letters(self, requests: Sequence[LetterRequest], progress: Progress) -> list[Score]:
        """Each prompt's letter log-probs (module docstring), in order."""
        out = []
        for r in requests:
            raw = [-8.0 * self._draw(r.text, c) for c in r.continuations]
            top = max(raw)
            total = top + math.log(sum(math.exp(v - top) for v in raw))
            values = per_letter([v - total for v in raw], r.options)
            n = len(self.encode(r.text))
            out.append(Score(argmax(values), values, n_tokens=n, forwarded=n, scored_by="fake"))
            self._pace()
            progress(1)
        return out

    def generate(self, requests: Sequence[GenerationRequest], progress: Progress) -> list[Score]:
        """Each prompt's answer, written as the run's extraction reads it (module docstring)."""
        out = []
        for r in requests:
            out.append(self._generated(r))
            self._pace()
            progress(1)
        return out

    def _generated(self, r: GenerationRequest) -> Score:
        scoring, n = self.cfg.scoring, len(self.encode(r.text))
        pick = self._draw(r.text, "answer")
        letter = "Z" if int(pick * 10_000) % INVALID_EVERY == 0 else letters(r.options)[int(pick * r.options)]
        if scoring.extract == "cascade":
            text = (
                f" Let's think step by step. The options were weighed. The answer is ({letter}).\n\nQuestion:"
            )
            cuts = [text.index(s) for s in scoring.stop if s in text]
            kept = text[: min(cuts)] if cuts else text
            prediction, rule = extract(kept, r.options)
            finish = "stop" if cuts else "end"
            return Score(prediction, generated=kept, n_tokens=n, forwarded=n, scored_by="fake",
                         extraction=rule, new_tokens=len(self.encode(kept)), finish=finish)  # fmt: skip
        text = f" {letter}" if scoring.extract == "first_char" else f" The answer is ({letter})."
        return Score(
            read_answer(text, scoring, r.options), generated=text, n_tokens=n, forwarded=n, scored_by="fake"
        )

    def _pace(self) -> None:
        if self.cfg.model.fake_seconds_per_question:
            time.sleep(self.cfg.model.fake_seconds_per_question)

    def _draw(self, text: str, what: str) -> float:
        """A number in [0, 1) from the seed, the dtype (away from float32: moved a little) and the text."""
        seed = self.cfg.model.tiny_seed
        base = _unit(f"{seed}\x00{text}\x00{what}")
        if self._info.dtype == "float32":
            return base
        return min(
            max(base + 0.02 * (_unit(f"{seed}\x00{self._info.dtype}\x00{text}\x00{what}") - 0.5), 0.0), 0.9999
        )

    def traffic(self) -> Traffic:
        """No requests: nothing is served."""
        return Traffic()

    def close(self) -> None:
        """Nothing is held open."""


def _unit(key: str) -> float:
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2**64
