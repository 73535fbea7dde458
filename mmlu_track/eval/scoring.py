"""Scoring prompts with a loaded model: `SCORERS = {"logprob": ..., "generate": ...}`.

Both scorers take the prompt texts of one subject and return one `Score` per prompt, in order.
Prompts are sorted longest first and cut into batches of at most `batch_size` rows and, with
`max_tokens`, at most that many padded tokens (rows x longest row): short questions travel in
bigger batches. Batches are left-padded with explicit position ids, so each row is computed as if
alone: results do not depend on the batching beyond float rounding.

`logprob`: the answer letters are continuations `" A"`..`" D"` (the letter carries the leading
space). Their ids are found in context, by encoding `prompt + " A"` and removing the prompt's ids.
When all four are one token each and the prompt's ids are a prefix (the usual case), one forward
pass of the prompt gives all four log-probs from the last position's logits. Otherwise (a
tokenizer that splits `" A"` or merges across the boundary), each letter's full sequence is
scored and its continuation tokens' log-probs summed; `Score.multi_pass` says so.

Prefix cache (`ScoringConfig.prefix_cache`, logprob only): prompts that share a prefix (a
subject's header and shots) run it once; each question then forwards only its own tokens against
the cached keys and values, batched, with the attention mask covering prefix + padded suffix and
position ids continuing after the prefix. On CPU the prefix's keys and values are not copied at
all: `prefix_attention` attends to them and to the suffix apart and merges the two exactly; on
other devices (or models it cannot serve) the prefix's cache is expanded across the batch. A
question whose tokens do not start with the prefix's tokens takes the plain path
(`Score.prefix_fallback`). Batches that run out of memory are retried at half the size
(`run_batches`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from mmlu_track.config import ScoringConfig
from mmlu_track.eval.data import LETTERS
from mmlu_track.eval.models import LoadedModel

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Score:
    """The raw outcome for one prompt. `prediction` is None for an invalid generation."""

    prediction: int | None
    logprobs: tuple[float, float, float, float] | None = None
    generated: str | None = None
    n_tokens: int = 0
    truncated: bool = False
    multi_pass: bool = False
    forwarded: int = 0  # tokens run through the model for it; a shared prefix counts on one question
    prefix_fallback: bool = False  # the prefix cache was on but this prompt's tokens did not extend it


def _fit(ids: list[int], max_len: int) -> tuple[list[int], bool]:
    # Context fitting already dropped shots; a 0-shot prompt still too long keeps its end.
    return (ids[-max_len:], True) if len(ids) > max_len else (ids, False)


def _left_pad(seqs: Sequence[list[int]], pad_id: int, device: str) -> tuple[torch.Tensor, ...]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    # Positions count real tokens only, so a left-padded row sees the positions it would alone.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def _letter_sequences(lm: LoadedModel, text: str) -> tuple[list[int], list[list[int]], bool]:
    """(prompt ids, prompt + letter ids for each letter, whether one pass at the end suffices)."""
    ctx, *wholes = lm.encode_many([text, *(f"{text} {letter}" for letter in LETTERS)])
    one_pass = all(len(w) == len(ctx) + 1 and w[: len(ctx)] == ctx for w in wholes)
    return ctx, wholes, one_pass


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b) - 1) and a[n] == b[n]:
        n += 1
    return n


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def run_batches(
    lengths: Mapping[int, int],
    batch_size: int,
    run: Callable[[list[int]], None],
    *,
    max_tokens: int | None = None,
) -> int:
    """Call `run` on batches of the items of `lengths` (item -> its tokens), longest first, and
    return the row limit that worked last.

    A batch has at most `batch_size` rows and, with `max_tokens`, at most `max_tokens` padded
    tokens (rows x the batch's longest row), so a batch of short questions holds more of them.
    On out-of-memory both limits halve (never below one row) and the batch is retried whole.
    """
    order = sorted(lengths, key=lambda i: -lengths[i])  # stable: equal lengths keep their order
    size, budget, start = batch_size, max_tokens, 0
    while start < len(order):
        stop = min(len(order), start + size)
        if budget is not None:
            # Longest first: the first row is the widest, so the budget buys this many rows.
            stop = min(stop, start + max(1, budget // max(1, lengths[order[start]])))
        chunk = order[start:stop]
        try:
            run(chunk)
        except (RuntimeError, torch.OutOfMemoryError) as err:
            if not _is_oom(err) or len(chunk) == 1:
                raise
            size = max(1, size // 2)
            budget = None if budget is None else max(1, budget // 2)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            print(f"mmlu_track: out of memory, batch size now {size} rows / {budget} tokens", file=sys.stderr)
            continue
        start += len(chunk)
    return size


def _as_tuple(vals: list[float]) -> tuple[float, float, float, float]:
    return (vals[0], vals[1], vals[2], vals[3])


def score_logprob(
    lm: LoadedModel,
    texts: Sequence[str],
    cfg: ScoringConfig,
    batch_size: int,
    progress: Progress,
    *,
    prefixes: Sequence[str] | None = None,
    max_tokens: int | None = None,
) -> list[Score]:
    """Log-probs of " A".." D" after each text. With `cfg.prefix_cache` and `prefixes` (each
    text's shared prefix, see `prompts.shared_prefix`), each distinct prefix is run once and only
    the rest of each prompt is forwarded against its cached keys and values."""
    max_len = lm.info.max_length
    encoded: list[tuple[list[int], bool]] = []
    letter_ids: list[list[int]] = []
    multi: dict[int, list[tuple[int, list[int]]]] = {}
    groups: dict[str, list[int]] = {}
    plain: list[int] = []
    for i, text in enumerate(texts):
        ctx, wholes, one_pass = _letter_sequences(lm, text)
        encoded.append(_fit(ctx, max_len))
        letter_ids.append([w[-1] for w in wholes])
        if not one_pass:
            multi[i] = [(_shared_prefix(ctx, w), w) for w in wholes]
        elif cfg.prefix_cache and prefixes is not None and not encoded[i][1]:
            groups.setdefault(prefixes[i], []).append(i)
        else:
            plain.append(i)
    logprobs: list[tuple[float, float, float, float] | None] = [None] * len(texts)
    forwarded = [0] * len(texts)
    fallback: set[int] = set()

    def take(rows: Sequence[int], lp: torch.Tensor) -> None:
        for r, i in enumerate(rows):
            logprobs[i] = _as_tuple(lp[r, letter_ids[i]].tolist())
        progress(len(rows))

    with torch.inference_mode():
        for prefix_text, idx in groups.items():
            # Cut at the last non-space: BPE tokenizers split the "\n\n" before a question
            # differently from a trailing "\n\n", so the boundary sits before it.
            prefix_ids = lm.encode(prefix_text.rstrip())
            n = len(prefix_ids)
            ok = [i for i in idx if len(encoded[i][0]) > n and encoded[i][0][:n] == prefix_ids]
            extends = set(ok)
            missed = [i for i in idx if i not in extends]
            done = bool(ok) and _score_with_prefix(
                lm, prefix_ids, ok, encoded=encoded, batch_size=batch_size, max_tokens=max_tokens,
                take=take, forwarded=forwarded,
            )  # fmt: skip
            fallback.update(missed if done else idx)
            plain.extend(missed if done else idx)

        def run_plain(rows: list[int]) -> None:
            ids, mask, pos = _left_pad([encoded[i][0] for i in rows], lm.pad_id, lm.info.device)
            logits = lm.model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1).logits
            take(rows, torch.log_softmax(logits[:, -1, :].float(), dim=-1))
            for i in rows:
                forwarded[i] = len(encoded[i][0])

        lengths = {i: len(encoded[i][0]) for i in plain}
        run_batches(lengths, batch_size, run_plain, max_tokens=max_tokens)
        for i, conts in multi.items():
            logprobs[i] = _score_sequences(lm, conts)
            forwarded[i] = sum(len(w) for _, w in conts)
            progress(1)
    scores = []
    for i, lps in enumerate(logprobs):
        assert lps is not None
        scores.append(
            Score(
                prediction=int(np.argmax(lps)),
                logprobs=lps,
                n_tokens=len(encoded[i][0]),
                truncated=encoded[i][1],
                multi_pass=i in multi,
                forwarded=forwarded[i],
                prefix_fallback=i in fallback and cfg.prefix_cache,
            )
        )
    return scores


def _score_with_prefix(
    lm: LoadedModel,
    prefix_ids: list[int],
    rows: list[int],
    *,
    encoded: Sequence[tuple[list[int], bool]],
    batch_size: int,
    max_tokens: int | None,
    take: Callable[[Sequence[int], torch.Tensor], None],
    forwarded: list[int],
    shared_attention: bool = True,
) -> str | None:
    """Run the prefix once, then each row's remaining tokens against its keys and values; return
    how: "shared" (`prefix_attention`: the prefix is never copied, CPU), "cache" (the prefix's
    cache expanded across the batch) or None (nothing scored: the model's cache is not a plain
    per-layer key/value cache that can be shared)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    from mmlu_track.eval import prefix_attention

    device = lm.info.device
    n = len(prefix_ids)
    out = lm.model(input_ids=torch.tensor([prefix_ids], device=device), use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    if not isinstance(cache, DynamicCache):
        return None
    kv: list[tuple[torch.Tensor, torch.Tensor]] = []
    for layer in cache.layers:
        if not isinstance(layer, DynamicLayer) or type(layer) is not DynamicLayer:  # no sliding window
            return None
        if layer.keys is None or layer.values is None:
            return None
        kv.append((layer.keys, layer.values))
    forwarded[rows[0]] += n
    suffixes = {i: encoded[i][0][n:] for i in rows}
    how = "shared" if shared_attention else "cache"

    def forward_shared(ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor | None:
        shared = prefix_attention.SharedPrefix(kv, mask)
        try:
            logits = lm.model(
                input_ids=ids, attention_mask=mask, position_ids=pos + n, use_cache=False,
                logits_to_keep=1, shared_prefix=shared,
            ).logits  # fmt: skip
        except prefix_attention.Unsupported:
            return None
        # Every layer must have seen the prefix; a model that drops the argument saw none of it.
        return logits if shared.calls == len(kv) else None

    def forward_cache(ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b = len(ids)
        # expand() is a view: the prefix's keys and values are shared until the cache appends.
        expanded = DynamicCache(
            ddp_cache_data=[(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in kv]
        )
        full_mask = torch.cat([torch.ones((b, n), dtype=mask.dtype, device=device), mask], dim=1)
        return lm.model(  # type: ignore[no-any-return]
            input_ids=ids, attention_mask=full_mask, position_ids=pos + n, past_key_values=expanded,
            use_cache=True, logits_to_keep=1,
        ).logits  # fmt: skip

    def run(batch: list[int]) -> None:
        nonlocal how
        ids, mask, pos = _left_pad([suffixes[i] for i in batch], lm.pad_id, device)
        logits = forward_shared(ids, mask, pos) if how == "shared" else None
        if logits is None:
            how = "cache"
            logits = forward_cache(ids, mask, pos)
        take(batch, torch.log_softmax(logits[:, -1, :].float(), dim=-1))
        for i in batch:
            forwarded[i] += len(suffixes[i])

    with prefix_attention.use_shared_prefix(lm.model) as switched:
        how = how if switched else "cache"
        run_batches({i: len(s) for i, s in suffixes.items()}, batch_size, run, max_tokens=max_tokens)
    return how


@torch.inference_mode()
def _score_sequences(
    lm: LoadedModel, conts: list[tuple[int, list[int]]]
) -> tuple[float, float, float, float]:
    """Sum of log P(token | earlier tokens) over each letter sequence's tokens after its kept prefix."""
    seqs = [whole[-lm.info.max_length :] for _, whole in conts]
    ids, mask, pos = _left_pad(seqs, lm.pad_id, lm.info.device)
    lp = torch.log_softmax(
        lm.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float(), dim=-1
    )
    width = ids.shape[1]
    out = []
    for row, ((keep, whole), seq) in enumerate(zip(conts, seqs, strict=True)):
        n_cont = min(len(whole) - keep, len(seq) - 1)
        total = 0.0
        for j in range(width - n_cont, width):
            total += float(lp[row, j - 1, ids[row, j]])
        out.append(total)
    return (out[0], out[1], out[2], out[3])


def parse_generation(text: str) -> int | None:
    """The answer index from a generation: its first non-whitespace character, if A-D."""
    stripped = text.lstrip()
    if stripped and stripped[0] in LETTERS:
        return LETTERS.index(stripped[0])
    return None


def score_generate(
    lm: LoadedModel,
    texts: Sequence[str],
    cfg: ScoringConfig,
    batch_size: int,
    progress: Progress,
    *,
    prefixes: Sequence[str] | None = None,  # unused: generation runs whole prompts
    max_tokens: int | None = None,
) -> list[Score]:
    from transformers import GenerationConfig

    # Room for the new tokens: the prompt keeps its end if it is too long.
    max_len = lm.info.max_length - cfg.max_new_tokens
    encoded = [_fit(lm.encode(t), max_len) for t in texts]
    gen_cfg = GenerationConfig(  # type: ignore[no-untyped-call]
        max_new_tokens=cfg.max_new_tokens,
        do_sample=False,
        pad_token_id=lm.pad_id,
        eos_token_id=lm.tokenizer.eos_token_id,
    )
    generated: list[str] = [""] * len(texts)

    def run(batch: list[int]) -> None:
        ids, mask, _ = _left_pad([encoded[i][0] for i in batch], lm.pad_id, lm.info.device)
        out = lm.model.generate(input_ids=ids, attention_mask=mask, generation_config=gen_cfg)
        for r, i in enumerate(batch):
            generated[i] = lm.decode(out[r, ids.shape[1] :].tolist())
        progress(len(batch))

    with torch.inference_mode():
        lengths = {i: len(ids) + cfg.max_new_tokens for i, (ids, _) in enumerate(encoded)}
        run_batches(lengths, batch_size, run, max_tokens=max_tokens)
    return [
        Score(
            prediction=parse_generation(g),
            generated=g,
            n_tokens=len(encoded[i][0]),
            truncated=encoded[i][1],
            forwarded=len(encoded[i][0]),
        )
        for i, g in enumerate(generated)
    ]


class Scorer(Protocol):
    """Scores one subject's prompts in order; `prefixes[i]` is the start text i shares with others.
    A batch holds at most `batch_size` prompts and, unless `max_tokens` is None, at most
    `max_tokens` padded tokens (never fewer than one prompt)."""

    def __call__(
        self,
        lm: LoadedModel,
        texts: Sequence[str],
        cfg: ScoringConfig,
        batch_size: int,
        progress: Progress,
        *,
        prefixes: Sequence[str] | None = None,
        max_tokens: int | None = None,
    ) -> list[Score]: ...


SCORERS: dict[str, Scorer] = {
    "logprob": score_logprob,
    "generate": score_generate,
}


def calibrate(logprobs: np.ndarray, method: str) -> np.ndarray:
    """One subject's (n, 4) log-prob matrix as the argmax should see it.

    `none`: unchanged. `mean`: each letter's mean log-prob over the subject's questions subtracted,
    which removes a model's constant preference for some letters.
    """
    if method == "none":
        return logprobs
    if method == "mean":
        return np.asarray(logprobs - logprobs.mean(axis=0, keepdims=True))
    raise ValueError(f"unknown calibration {method!r}")
