"""A subject's shared prefix (header + shots) run once; batches of question suffixes run against it.

`run_groups` checks which prompts' tokens extend their prefix's tokens (the others take the
scorer's plain path) and hands each prefix's rows to the scorer, which runs them with
`run_suffixes` (the prefix once, then its rows' suffixes in batches); `run_prefix` computes the
prefix's per-layer keys and values (None for a model whose cache is not a plain per-layer
key/value cache: sliding windows, recurrent layers), and `suffix_forward` yields a
`SuffixForward` that runs left-padded suffix batches against them, optionally keeping the
suffix's own cache so that generation can append decoded tokens to it:

- "shared" (CPU and CUDA, SDPA models): `prefix_attention` attends to the one prefix and, apart, to each
  row's own keys, merged exactly; the prefix is never copied, not even while decoding;
- "cache": the prefix's cache expanded across the batch (a view until the first append copies it),
  for other devices and for models that do not pass the prefix through to every layer.

Callers pass each row's suffix mask and positions counted from the end of the prefix; the prefix's
length is added here.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from mmlu_track.eval import prefix_attention
from mmlu_track.eval.batching import Batching, run_batches
from mmlu_track.eval.models import LoadedModel

KV = list[tuple[torch.Tensor, torch.Tensor]]


def group(
    on: bool, prefixes: Sequence[str] | None, encoded: Sequence[tuple[list[int], bool]], rows: Iterable[int]
) -> tuple[dict[str, list[int]], list[int]]:
    """(rows by their prefix text, the rows for the plain path): all of them unless `on` and
    `prefixes` are given; a prompt with no prefix (""), or cut to fit the context (it never starts
    with its prefix), takes the plain path."""
    groups: dict[str, list[int]] = {}
    plain: list[int] = []
    for i in rows:
        if on and prefixes is not None and prefixes[i] and not encoded[i][1]:
            groups.setdefault(prefixes[i], []).append(i)
        else:
            plain.append(i)
    return groups, plain


def split(
    lm: LoadedModel, prefix_text: str, rows: Sequence[int], encoded: Sequence[tuple[list[int], bool]]
) -> tuple[list[int], list[int], list[int]]:
    """(the prefix's ids, the rows whose ids extend them by at least one token, the other rows)."""
    # Cut at the last non-space: BPE tokenizers split the "\n\n" before a question differently
    # from a trailing "\n\n", so the boundary sits before it.
    prefix_ids = lm.encode(prefix_text.rstrip())
    n = len(prefix_ids)
    ok = [i for i in rows if len(encoded[i][0]) > n and encoded[i][0][:n] == prefix_ids]
    extends = set(ok)
    return prefix_ids, ok, [i for i in rows if i not in extends]


def run_groups(
    lm: LoadedModel,
    groups: Mapping[str, list[int]],
    encoded: Sequence[tuple[list[int], bool]],
    run: Callable[[list[int], list[int]], str | None],
) -> list[int]:
    """`run(prefix ids, rows that extend them)` for each prefix text's rows; returns the rows left
    for the plain path: those that do not extend their prefix, and all of a group `run` refused
    (returned None)."""
    left: list[int] = []
    for prefix_text, rows in groups.items():
        prefix_ids, ok, missed = split(lm, prefix_text, rows, encoded)
        done = bool(ok) and run(prefix_ids, ok) is not None
        left.extend(missed if done else rows)
    return left


# The most bytes of prefixes kept between calls, on the model's device; None: by the device (2 GiB
# of RAM; an eighth of a GPU's memory, where a batch that then runs out backs off). All 57 subjects'
# 5-shot prefixes of SmolLM2-135M take 1.9 GB in float32; a 7B model's about 5 GB in bfloat16.
KEPT_BYTES: int | None = None
KEPT_CPU_BYTES = 2 * 2**30
# Prefixes run before, by model: they live as long as the model does (a weak key), not longer.
_KEPT: weakref.WeakKeyDictionary[Any, dict[tuple[int, ...], KV]] = weakref.WeakKeyDictionary()


def kept_prefix(lm: LoadedModel, prefix_ids: list[int]) -> KV | None:
    """A prefix run in an earlier call, if kept. The sequential gate scores a subject a slice per
    look: without this, each look ran the subject's few-shot prefix again (2.5x a plain run's time
    at 5 questions a subject). Exact: the same ids through the same weights, and neither suffix
    path writes to a prefix's tensors."""
    return _KEPT.get(lm.model, {}).get(tuple(prefix_ids))


def forget(lm: LoadedModel) -> None:
    """Drop the prefixes kept for `lm` (a measurement of what a prefix costs starts from none)."""
    _KEPT.pop(lm.model, None)


def keep_prefix(lm: LoadedModel, prefix_ids: list[int], kv: KV) -> None:
    """Keep `kv` while the kept prefixes stay within their budget; never evicts (a look visits the
    subjects in one order: evicting the oldest would miss every time once they do not all fit)."""
    kept = _KEPT.setdefault(lm.model, {})
    size = sum(t.numel() * t.element_size() for pair in kv for t in pair)
    held = sum(t.numel() * t.element_size() for v in kept.values() for pair in v for t in pair)
    if held + size <= _budget(lm):
        kept[tuple(prefix_ids)] = kv


def _budget(lm: LoadedModel) -> int:
    if KEPT_BYTES is not None:
        return KEPT_BYTES
    device = torch.device(lm.info.device)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory) // 8
    return KEPT_CPU_BYTES


def run_prefix(lm: LoadedModel, prefix_ids: list[int]) -> KV | None:
    """Each layer's keys and values `[1, kv_heads, prefix, d]`, or None if the cache is not plain."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    ids = torch.tensor([prefix_ids], device=lm.info.device)
    cache = lm.model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
    if not isinstance(cache, DynamicCache):
        return None
    kv: KV = []
    for layer in cache.layers:
        if not isinstance(layer, DynamicLayer) or type(layer) is not DynamicLayer:  # no sliding window
            return None
        if layer.keys is None or layer.values is None:
            return None
        kv.append((layer.keys, layer.values))
    return kv


class SuffixForward:
    """Runs suffix batches against one prefix; `how` says which way ("shared" or "cache")."""

    def __init__(self, lm: LoadedModel, kv: KV, how: str) -> None:
        """The model, the prefix's per-layer keys and values (`run_prefix`) and the way to start with."""
        self.lm, self.kv, self.how = lm, kv, how
        self.n = kv[0][0].shape[2]

    def __call__(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        pos: torch.Tensor,
        cache: Any = None,
        *,
        keep: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """(last position's logits `[rows, vocab]`, the cache to pass with the next tokens if `keep`).

        `mask` covers every suffix token so far, those in `cache` and `ids` (1 = token, left-padded);
        `pos` are `ids`' positions within the suffix. A `cache` is one this call returned."""
        if self.how == "shared":
            out = self._shared(ids, mask, pos, cache, keep)
            if out is not None:
                return out
            if cache is not None:  # it holds no prefix: nothing to fall back to mid-generation
                raise RuntimeError("shared-prefix attention refused a decoding step it had accepted")
            self.how = "cache"
        return self._cache(ids, mask, pos, cache, keep)

    def _shared(
        self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any, keep: bool
    ) -> tuple[torch.Tensor, Any] | None:
        shared = prefix_attention.SharedPrefix(self.kv, mask)
        try:
            out = self.lm.model(
                input_ids=ids, attention_mask=mask, position_ids=pos + self.n, past_key_values=cache,
                use_cache=keep, logits_to_keep=1, shared_prefix=shared,
            )  # fmt: skip
        except prefix_attention.Unsupported:
            return None
        # Every layer must have seen the prefix; a model that drops the argument saw none of it.
        if shared.calls != len(self.kv):
            return None
        return out.logits[:, -1, :], out.past_key_values if keep else None

    def _cache(
        self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any, keep: bool
    ) -> tuple[torch.Tensor, Any]:
        from transformers import DynamicCache

        b = len(ids)
        if cache is None:
            # expand() is a view: the prefix's keys and values are shared until the cache appends.
            cache = DynamicCache(
                ddp_cache_data=[(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in self.kv]
            )
        full_mask = torch.cat([torch.ones((b, self.n), dtype=mask.dtype, device=mask.device), mask], dim=1)
        out = self.lm.model(
            input_ids=ids, attention_mask=full_mask, position_ids=pos + self.n, past_key_values=cache,
            use_cache=True, logits_to_keep=1,
        )  # fmt: skip
        return out.logits[:, -1, :], out.past_key_values if keep else None


@contextmanager
def suffix_forward(lm: LoadedModel, kv: KV, *, shared: bool = True) -> Iterator[SuffixForward]:
    """A `SuffixForward` over `kv`, "shared" where the model can be switched to it (CPU, CUDA; SDPA)."""
    with prefix_attention.use_shared_prefix(lm.model) as switched:
        yield SuffixForward(lm, kv, "shared" if shared and switched else "cache")


SuffixBatch = Callable[[SuffixForward, Mapping[int, list[int]], list[int]], None]


@dataclass(frozen=True)
class Suffixes:
    """One prefix's rows: the prefix's ids, the rows (indices into `encoded`, each prompt's ids and
    whether cut) whose ids extend them, and the tokens forwarded per prompt, counted as they run."""

    prefix_ids: list[int]
    rows: list[int]
    encoded: Sequence[tuple[list[int], bool]]
    forwarded: list[int]


def run_suffixes(
    lm: LoadedModel, work: Suffixes, batching: Batching, run: SuffixBatch, *, shared: bool = True
) -> str | None:
    """Run the prefix once (or take it kept from an earlier call), then `run(forward, suffixes,
    batch)` for each batch of `work.rows` (their tokens after the prefix, batched by `run_batches`);
    return how (`SuffixForward.how`), or None (nothing run: the model's cache is not a plain
    per-layer key/value cache that can be shared). A prefix run here counts its tokens in
    `work.forwarded` on the first row; `run` counts each row's own."""
    prefix_ids, rows, encoded, forwarded = work.prefix_ids, work.rows, work.encoded, work.forwarded
    n = len(prefix_ids)
    kv = kept_prefix(lm, prefix_ids)
    if kv is None:
        kv = run_prefix(lm, prefix_ids)
        if kv is None:
            return None
        keep_prefix(lm, prefix_ids, kv)
        forwarded[rows[0]] += n
    suffixes = {i: encoded[i][0][n:] for i in rows}
    with suffix_forward(lm, kv, shared=shared) as forward:
        lengths = {i: len(s) for i, s in suffixes.items()}
        run_batches(lengths, batching, lambda batch: run(forward, suffixes, batch))
        return forward.how
