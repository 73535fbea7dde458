r"""Generation scoring: greedy decoding; the answer is read by `ScoringConfig.extract`
(`answers.read_answer`): the first non-whitespace character (A-D, else invalid and wrong), or the
first answer pattern that matches.

With `first_char`, a row's answer is decided once its decoded text has a non-whitespace character
(or it ends: the end-of-sequence token, or `max_new_tokens`), so each row stops there and a batch
stops when all of its rows have: the tokens after the deciding one cannot change
`parse_generation`'s result, and `Score.generated` holds the decided part only. A newline does not
stop a row: `parse_generation` skips leading whitespace, newlines included, so `"\nB"` answers B.
With `pattern`, a later token can always complete a match ("The answer is" ... " B"), so a row
decodes until it ends, and `Score.generated` is the whole generation. With `scoring.stop` (a chain
of thought, `cascade`: MMLU-Pro's `Question:`), a row ends once its decoded text holds a stop string
(which may span tokens) and is read up to it; `Score.finish` says why it ended (`stop`, `end`,
`length`) and `Score.new_tokens` how many tokens it took.

With `ScoringConfig.prefix_cache` and the prompts' shared prefixes, generation costs what
log-prob scoring costs plus its decode steps: each subject's prefix runs once
(`prefix_cache.run_suffixes`), each batch prefills only its questions' own tokens against it
(left-padded, positions continuing after the prefix, as in the log-prob path), and each decode
step forwards one token per row still undecided, its keys and values appended to the row's own
suffix cache; on CPU the prefix is never copied (`prefix_attention`). Rows that stop leave the
batch. Without the prefix (or for prompts that do not extend it, or a model whose cache cannot be
shared) transformers' `generate` decodes the whole prompts with the same stopping rule.
Either way the tokens are those of plain greedy decoding of the whole prompt (tested).

`Score.forwarded` counts the tokens run through the model: a prefix once per subject, each
question's own tokens, and one per decode step the row took part in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mmlu_track.eval import prefix_cache
from mmlu_track.eval.answers import extract, read_answer
from mmlu_track.eval.backend import GenerationRequest
from mmlu_track.eval.batching import Batching, Progress, Score, fit, left_pad, run_batches
from mmlu_track.eval.models import LoadedModel
from mmlu_track.eval.prefix_cache import Suffixes
from mmlu_track.settings.config import ScoringConfig


def decided(text: str) -> bool:
    """Whether `parse_generation` of any continuation of `text` is already known."""
    stripped = text.lstrip()
    # A character split across byte-level tokens decodes as U+FFFD until its last byte arrives,
    # and the whole character might yet be whitespace.
    return bool(stripped) and stripped[0] != "\ufffd"


def _stops(lm: LoadedModel, tokens: list[int]) -> bool:
    return tokens[-1] == lm.tokenizer.eos_token_id or decided(lm.decode(tokens))


def _ends(lm: LoadedModel, tokens: list[int]) -> bool:
    return bool(tokens[-1] == lm.tokenizer.eos_token_id)


Stops = Callable[[LoadedModel, list[int]], bool]


def _at_stop(stop: Sequence[str]) -> Stops:
    """A row ends at the end of sequence or once its decoded text holds one of `stop`: checked on
    its last tokens only, as many as the longest stop string has characters and one more (a stop
    string is found the step it is completed, so it lies within them; a token is a character or more)."""
    tail = max(len(s) for s in stop) + 1

    def stops(lm: LoadedModel, tokens: list[int]) -> bool:
        if tokens[-1] == lm.tokenizer.eos_token_id:
            return True
        text = lm.decode(tokens[-tail:])
        return any(s in text for s in stop)

    return stops


def _ended(text: str, tokens: list[int], lm: LoadedModel, cfg: ScoringConfig) -> tuple[str, str]:
    """The generation as read (before the first stop string) and why it ended: `stop`, `end` (the
    end-of-sequence token) or `length` (cut by `max_new_tokens`)."""
    cuts = [text.index(s) for s in cfg.stop if s in text]
    if cuts:
        return text[: min(cuts)], "stop"
    if tokens and tokens[-1] == lm.tokenizer.eos_token_id:
        return text, "end"
    return text, "length" if len(tokens) >= cfg.max_new_tokens else "end"


def _decided_length(stops: Stops, lm: LoadedModel, tokens: list[int]) -> int:
    return next((j for j in range(1, len(tokens) + 1) if stops(lm, tokens[:j])), len(tokens))


def score_generate(
    lm: LoadedModel, requests: Sequence[GenerationRequest], batching: Batching, progress: Progress
) -> list[Score]:
    """Greedy generation after each request's text, up to the scoring's `max_new_tokens`, stopped
    once decided. With its `prefix_cache`, each distinct `prefix` is run once. A chat request's
    `messages` are rendered already: `text` is what the model reads."""
    cfg = batching.scoring
    # Room for the new tokens: the prompt keeps its end if it is too long.
    encoded = [fit(lm.encode(r.text), lm.info.max_length - cfg.max_new_tokens) for r in requests]
    # read at call time: tests replace _stops
    stops = _stops if cfg.extract == "first_char" else _at_stop(cfg.stop) if cfg.stop else _ends
    work = _Work(lm, encoded, batching, progress, stops)
    prefixes = [r.prefix for r in requests]
    groups, plain = prefix_cache.group(cfg.prefix_cache, prefixes, encoded, range(len(requests)))
    with torch.inference_mode():
        left = prefix_cache.run_groups(
            lm, groups, encoded, lambda ids, rows: _generate_with_prefix(work, ids, rows)
        )
        _generate_plain(work, plain + left)
    texts_out = [lm.decode(toks) for toks in work.tokens]
    fallback = set(left)
    return [
        dataclasses.replace(
            _score(lm, cfg, text, work.tokens[i], requests[i].options),
            n_tokens=len(ids),
            truncated=cut,
            forwarded=work.forwarded[i],
            prefix_fallback=i in fallback,
        )
        for i, (text, (ids, cut)) in enumerate(zip(texts_out, encoded, strict=True))
    ]


def _score(lm: LoadedModel, cfg: ScoringConfig, text: str, tokens: list[int], options: int) -> Score:
    """A generation as scored: read by `cfg.extract`; a chain of thought (`cascade`) cut at its stop
    string and read by `answers.extract`, with the rule, its token count and why it ended."""
    if cfg.extract == "first_char":
        return Score(prediction=read_answer(text, cfg, options), generated=text)
    kept, finish = _ended(text, tokens, lm, cfg)
    if cfg.extract == "pattern":
        return Score(read_answer(kept, cfg, options), generated=kept, new_tokens=len(tokens), finish=finish)
    prediction, rule = extract(kept, options)
    return Score(prediction, generated=kept, extraction=rule, new_tokens=len(tokens), finish=finish)


@dataclass
class _Work:
    """One call's prompts, how to batch them, and what generation writes back for each prompt."""

    lm: LoadedModel
    encoded: Sequence[tuple[list[int], bool]]
    batching: Batching
    progress: Progress
    stops: Stops  # whether a row's tokens so far settle its answer (or end it)
    tokens: list[list[int]] = field(init=False)  # the decided tokens
    forwarded: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = [[] for _ in self.encoded]
        self.forwarded = [0] * len(self.encoded)

    @property
    def max_new(self) -> int:
        return self.batching.scoring.max_new_tokens


def _generate_with_prefix(
    work: _Work, prefix_ids: list[int], rows: list[int], *, shared_attention: bool = True
) -> str | None:
    """Run the prefix once, then decode each batch of rows against it, filling `work.tokens[i]`;
    return how (`prefix_cache.SuffixForward.how`), or None (nothing done: the model's cache
    cannot be shared)."""
    lm, stops = work.lm, work.stops
    device = lm.info.device

    def run(forward: prefix_cache.SuffixForward, suffixes: Mapping[int, list[int]], batch: list[int]) -> None:
        out: dict[int, list[int]] = {i: [] for i in batch}  # kept apart: an OOM retries the batch
        ids, mask, pos = left_pad([suffixes[i] for i in batch], lm.pad_id, device)
        logits, cache = forward(ids, mask, pos, keep=True)
        active = list(batch)
        while True:
            for i, token in zip(active, logits.float().argmax(-1).tolist(), strict=True):
                out[i].append(token)
            going = [r for r, i in enumerate(active) if len(out[i]) < work.max_new and not stops(lm, out[i])]
            if not going:
                break
            if len(going) < len(active):  # decided rows leave the batch and its cache
                keep = torch.tensor(going, device=device)
                cache.batch_select_indices(keep)
                mask, pos = mask[keep], pos[keep]
                active = [active[r] for r in going]
            ids = torch.tensor([[out[i][-1]] for i in active], device=device)
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
            pos = pos[:, -1:] + 1  # the last column is always a real token
            logits, cache = forward(ids, mask, pos, cache, keep=True)
        for i in batch:
            work.tokens[i] = out[i]
            # The prompt's tokens, then one per decode step: every token but the last was fed back.
            work.forwarded[i] += len(suffixes[i]) + len(out[i]) - 1
        work.progress(len(batch))

    suffixes = Suffixes(prefix_ids, rows, work.encoded, work.forwarded)
    return prefix_cache.run_suffixes(lm, suffixes, work.batching, run, shared=shared_attention)


def _generate_plain(work: _Work, rows: list[int]) -> None:
    """Greedy decoding by transformers' `generate` over whole prompts, stopped per row once decided."""
    from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

    lm = work.lm

    class Decided(StoppingCriteria):
        def __init__(self, width: int) -> None:
            self.width = width

        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            new = input_ids[:, self.width :].tolist()
            done = [work.stops(lm, row) for row in new]
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    gen_cfg = GenerationConfig(  # type: ignore[no-untyped-call]
        max_new_tokens=work.max_new,
        do_sample=False,
        pad_token_id=lm.pad_id,
        eos_token_id=lm.tokenizer.eos_token_id,
    )

    def run(batch: list[int]) -> None:
        ids, mask, _ = left_pad([work.encoded[i][0] for i in batch], lm.pad_id, lm.info.device)
        width = ids.shape[1]
        out = lm.model.generate(
            input_ids=ids, attention_mask=mask, generation_config=gen_cfg,
            stopping_criteria=StoppingCriteriaList([Decided(width)]),
        )  # fmt: skip
        steps = out.shape[1] - width
        for r, i in enumerate(batch):
            new = out[r, width:].tolist()
            # After a row stops, generate pads it.
            work.tokens[i] = new[: _decided_length(work.stops, lm, new)]
            # Every row is forwarded at every step until the whole batch stops.
            work.forwarded[i] = len(work.encoded[i][0]) + steps - 1
        work.progress(len(batch))

    lengths = {i: len(work.encoded[i][0]) + work.max_new for i in rows}
    run_batches(lengths, work.batching, run)
