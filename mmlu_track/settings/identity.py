"""Which settings determine a run's results: its identity (`identity_dict`, hashed with the
protocol by `eval.plan.identity` so that only an evaluation that would produce the same results
resumes a run) and what a comparison reports as differing (`gate.differs.what_differs`) leave out
the same settings, `RESULT_NEUTRAL`."""

from __future__ import annotations

import dataclasses
from typing import Any

from mmlu_track.settings.config import ChatConfig, EvalConfig, to_dict
from mmlu_track.settings.subjects import BENCHMARK_SUBJECTS

# Settings of a served model that say how to reach it, not what it computes: outside the identity.
SERVER_ONLY = ("base_url", "api_key_env", "max_concurrency", "timeout_s", "max_retries", "top_logprobs")
# Settings that say how a run is reached, batched, spread, cached or recorded, not what it computes
# (scores do not depend on batching: a run that ran out of memory resumes with smaller batches; all
# shards write into one run), nor the gate's own: outside a run's identity (`identity_dict`) and
# outside what a comparison reports as differing (`gate.differs.what_differs`). One list for both.
_HOW_RUN = ("tracking", "cache_dir", "batch_size", "batch_tokens", "threads", "shards", "shard", "gate")
# The fake model's pace (`eval.fake`) is how long it takes, never what it answers.
RESULT_NEUTRAL = (*_HOW_RUN, *(f"model.{key}" for key in (*SERVER_ONLY, "fake_seconds_per_question")))
# Of those, what a comparison still names when it differs, apart and as not changing results: a
# noise check between batch sizes says which ones it checked.
SHOWN_NEUTRAL = ("batch_size", "batch_tokens", "shards", "model.max_concurrency", "model.top_logprobs")


def canonical(cfg: EvalConfig) -> EvalConfig:
    """The settings in the one form of what they ask, so that a run's identity, its questions'
    fingerprint and every comparison of runs never depend on how a value was typed: the subjects in
    the benchmark's own order (a set: the order typed changes no question), the stop strings sorted
    and once each (a generation ends at the earliest of them, whichever is listed first), and
    `chat=multiturn` at 0 shots as `single_turn` (with no shots to put as turns both render the same
    messages: the header as system message, the question as the one user turn). `scoring.patterns`
    keeps its order: it is the order the extraction tries them in."""
    order = {s: i for i, s in enumerate(BENCHMARK_SUBJECTS[cfg.benchmark])}
    subjects = tuple(sorted(cfg.subjects, key=lambda s: (order.get(s, len(order)), s)))
    stop = tuple(sorted(set(cfg.scoring.stop)))
    chat = cfg.chat
    if chat.style == "multiturn" and cfg.k == 0:
        chat = dataclasses.replace(chat, style="single_turn")
    if (subjects, stop, chat) == (cfg.subjects, cfg.scoring.stop, cfg.chat):
        return cfg
    return dataclasses.replace(
        cfg, subjects=subjects, scoring=dataclasses.replace(cfg.scoring, stop=stop), chat=chat
    )


def is_result_neutral(key: str) -> bool:
    """Whether a flattened setting (`model.base_url`, `batch_size`) leaves a run's results alone."""
    return any(key == n or key.startswith(f"{n}.") for n in RESULT_NEUTRAL)


def identity_dict(cfg: EvalConfig) -> dict[str, Any]:
    """The settings that determine a run's results, beside `records.run.EvalProtocol` (which `plan.identity`
    adds): not where it is cached or recorded, nor how it is batched (scores do not depend on
    batching, so a run that ran out of memory resumes with smaller batches), nor how it is sharded
    (all shards write into one run), nor the sequential gate (its stopped run the same command
    without it resumes; its own settings are checked by the gate when a run is resumed)."""
    out = to_dict(cfg)
    for key in RESULT_NEUTRAL:
        group, _, sub = key.partition(".")
        (out[group] if sub else out).pop(sub or group)
    for key in ("served_name", "tokenizer"):  # unset: absent, as before a served model could be
        if out["model"][key] is None:
            out["model"].pop(key)
    if out["chat"] == dataclasses.asdict(ChatConfig()):  # raw prompts: as before chat prompts could be
        out.pop("chat")
    if out["data"]["annotations"] is None:  # as before MMLU-Redux annotations could be given
        out["data"].pop("annotations")
    if out["benchmark"] == "mmlu":  # as before MMLU-Pro
        out.pop("benchmark")
    if out["shot_seed"] is None:  # as before the shots' seed could be apart from the sample's
        out.pop("shot_seed")
    if out["scoring"]["choice_order"] == "as_given":  # as before rotations could be asked
        out["scoring"].pop("choice_order")
    if out["scoring"]["extract"] == "first_char":  # as before answers could be read by patterns
        out["scoring"].pop("extract")
        out["scoring"].pop("patterns")
    if not out["scoring"]["stop"]:  # as before generations could stop at a string
        out["scoring"].pop("stop")
    if out["scoring"].get("extract") != "cascade":  # as before chains of thought were read
        out["scoring"].pop("failed")
        out["scoring"].pop("failed_seed")
    return out
