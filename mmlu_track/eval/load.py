"""`BACKENDS`: a model's `source` -> the function that loads its backend (`backend.Backend`).

Each loader imports its backend when called, so a run loads torch and transformers only for a
model computed in-process (a served model needs neither).
"""

from __future__ import annotations

from collections.abc import Callable

from mmlu_track.eval import pins
from mmlu_track.eval.backend import Backend
from mmlu_track.settings.config import EvalConfig, is_served


def _in_process(cfg: EvalConfig, threads: int | None) -> Backend:
    from mmlu_track.eval import in_process

    return in_process.load_backend(cfg, threads)


def _fake(cfg: EvalConfig, threads: int | None) -> Backend:
    from mmlu_track.eval import fake

    return fake.load_backend(cfg, threads)


def _served(cfg: EvalConfig, threads: int | None) -> Backend:
    from mmlu_track.eval import openai_connect

    return openai_connect.connect(cfg)


BACKENDS: dict[str, Callable[[EvalConfig, int | None], Backend]] = {
    "hub": _in_process,  # a hub id or a local folder, loaded by transformers
    "gguf": _in_process,  # a GGUF file, converted once to a cached safetensors copy
    "tiny": _in_process,  # a tiny random Llama (tests, plumbing checks)
    "fake": _fake,  # no weights, no torch: answers drawn from a seed (tests where the model is not the point)
    "openai_api": _served,  # served over the OpenAI-compatible HTTP API: vLLM, SGLang, TGI, llama.cpp
}


def load_backend(cfg: EvalConfig, threads: int | None = None) -> Backend:
    """The configured model's backend, loaded (or reached) and ready to score; `threads`: the CPU
    threads in-process scoring uses, as resolved (`settings.resolved.Resolved.threads`; None: a
    number in `threads=` itself, else torch's default)."""
    return BACKENDS[cfg.model.source](cfg, threads)


def in_process(cfg: EvalConfig) -> bool:
    """Whether the configured model runs in this process on torch (seeded with the run's seed, on
    the CPU threads `threads=` chooses): not a served model, nor the fake one."""
    return not is_served(cfg.model.source) and cfg.model.source != "fake"


def pinned(cfg: EvalConfig) -> pins.Pinned | str:
    """The weights the configured model would load, known without loading them (`eval.pins`); else
    a sentence saying why they are known only once loaded."""
    if cfg.model.source == "fake":
        from mmlu_track.eval import fake

        return fake.pinned(cfg)
    if in_process(cfg):
        from mmlu_track.eval import in_process as backend

        return backend.pinned(cfg)
    return pins.served(cfg)
