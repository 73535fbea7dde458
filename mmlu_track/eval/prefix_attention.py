"""Attention of a batch of question suffixes over one shared prefix, without copying the prefix.

Through transformers' cache, every layer of every batch concatenates the prefix's keys and values
to each row (a copy per question), repeats them for each query head of a group (GQA), and runs
one masked attention over the whole prefix + suffix rectangle. Here the two parts are computed
apart and merged exactly through their log-sum-exps (softmax over a union of key sets):

- prefix: all the batch's queries, regrouped per key/value head into one long query
  `[1, kv_heads, rows * group * suffix, d]`, against the prefix's own keys and values
  `[1, kv_heads, prefix, d]`: no mask (a question token sees the whole prefix), no copy, no repeat;
- suffix: each row's queries against its own keys, causal and padding-masked (while decoding, the
  keys already in the row's cache too: its question and the tokens generated so far);
- `out = (o1 * e^(l1 - m) + o2 * e^(l2 - m)) / (e^(l1 - m) + e^(l2 - m))`, `m = max(l1, l2)`.

It needs the log-sum-exp, which PyTorch's CPU flash kernel returns, and on CUDA its memory-efficient
kernel (`_lse_attention`); a kernel that refuses its inputs raises `Unsupported` and the batch takes
the cache path (an out-of-memory error is not a refusal: it reaches the batch's back-off). Without a
`shared_prefix` argument the function is transformers' SDPA attention, so a model switched to it
runs its prefix and its plain batches as before (`use_shared_prefix`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

NAME = "mmlu_track_shared_prefix"
# Arguments that change attention in ways the two-part computation does not reproduce.
_UNSUPPORTED = ("softcap", "sliding_window", "s_aux", "sinks", "position_bias")
DEVICES = ("cpu", "cuda")  # where a kernel returns the log-sum-exp (`_lse_attention`)


class Unsupported(RuntimeError):
    """The model's attention needs something this implementation does not do; use the cache."""


@dataclass
class SharedPrefix:
    """What one suffix forward needs: each layer's prefix keys and values `[1, kv_heads, P, d]`
    (post-RoPE, as the cache holds them) and the padding mask `[rows, K]` of the suffix keys the
    layers attend to (1 = token, left-padded): the suffix's own tokens, and while decoding those
    already in its cache before them. `calls` counts the layers that used it, to prove the model
    passed it through."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    padding: torch.Tensor
    calls: int = 0
    _masks: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)

    def suffix_mask(self, group: int, queries: int, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask `[rows, 1, group * queries, K]` for the last `queries` of the K suffix
        positions: causal, no padded key. A padded query row sees itself, so no row is empty (its
        output is never read)."""
        if (group, queries) not in self._masks:
            rows, k = self.padding.shape
            device = self.padding.device
            # Query i sits at key position k - queries + i.
            at = torch.arange(k - queries, k, device=device)[:, None]
            keys = torch.arange(k, device=device)[None, :]
            keep = (keys <= at) & (self.padding.bool()[:, None, :] | (keys == at))
            add = torch.zeros(keep.shape, dtype=dtype, device=device).masked_fill_(~keep, float("-inf"))
            # Row r of query head j in group slot i reads mask row r: repeat along the query axis.
            add = add[:, None, None].expand(rows, 1, group, queries, k)
            self._masks[(group, queries)] = add.reshape(rows, 1, group * queries, k)
        return self._masks[(group, queries)]


Tensor = torch.Tensor


def _lse_attention(
    query: Tensor, key: Tensor, value: Tensor, bias: Tensor | None, scale: float | None
) -> tuple[Tensor, Tensor]:
    """Softmax attention's output `[B, H, S, d]` and log-sum-exp `[B, H, S]` (float32), heads
    matched (no GQA), `bias` additive `[B, 1, S, K]`: CPU's flash kernel, CUDA's memory-efficient
    one (its log-sum-exp padded to a multiple of 32 queries, its bias read in 16-aligned rows)."""
    if query.device.type == "cpu":
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        out, lse = flash(query, key, value, 0.0, False, attn_mask=bias, scale=scale)
        return out, lse
    if bias is not None:
        k = bias.shape[-1]
        aligned = torch.nn.functional.pad(bias, (0, -k % 16))[..., :k] if k % 16 else bias
        bias = aligned.expand(query.shape[0], query.shape[1], query.shape[2], k)
    try:
        efficient = torch.ops.aten._scaled_dot_product_efficient_attention
        out, lse = efficient(query, key, value, bias, True, 0.0, False, scale=scale)[:2]
    except torch.OutOfMemoryError:
        raise
    except RuntimeError as err:  # a shape, dtype or build the kernel does not take: the cache path
        raise Unsupported(f"CUDA's memory-efficient attention refused: {str(err).splitlines()[0]}") from err
    return out, lse[..., : query.shape[2]]


def attention(  # noqa: PLR0917 -- transformers calls attention functions positionally
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention under transformers' attention-function contract: query `[B, H, S, d]`, key/value
    `[B, Hkv, S, d]` -> output `[B, S, H, d]`. With `shared_prefix`, `attention_mask` is ignored (the
    suffix mask comes from `SharedPrefix.padding`)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    shared: SharedPrefix | None = kwargs.pop("shared_prefix", None)
    if shared is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if any(kwargs.get(k) is not None for k in _UNSUPPORTED) or getattr(module, "sinks", None) is not None:
        raise Unsupported(f"{type(module).__name__} uses an attention feature the two parts do not reproduce")
    layer = getattr(module, "layer_idx", None)
    if layer is None or layer >= len(shared.kv) or query.device.type not in DEVICES:
        raise Unsupported(f"no layer index, or not on {' or '.join(DEVICES)}")
    if key.shape[2] != shared.padding.shape[1]:
        raise Unsupported(f"{key.shape[2]} suffix keys for a padding mask of {shared.padding.shape[1]}")
    kp, vp = shared.kv[layer]
    b, h, s, d = query.shape
    hkv = key.shape[1]
    g = h // hkv
    qg = query.reshape(b, hkv, g, s, d)
    # Every query of the batch against the one prefix: a single long query per key/value head.
    o1, l1 = _lse_attention(qg.permute(1, 0, 2, 3, 4).reshape(1, hkv, b * g * s, d), kp, vp, None, scaling)
    o1 = o1.view(hkv, b, g, s, d).permute(1, 0, 2, 3, 4)
    l1 = l1.view(hkv, b, g, s).permute(1, 0, 2, 3)
    mask = shared.suffix_mask(g, s, query.dtype)
    o2, l2 = _lse_attention(qg.reshape(b, hkv, g * s, d), key, value, mask, scaling)
    o2 = o2.view(b, hkv, g, s, d)
    l2 = l2.view(b, hkv, g, s)
    top = torch.maximum(l1, l2)
    w1 = torch.exp(l1 - top).unsqueeze(-1)
    w2 = torch.exp(l2 - top).unsqueeze(-1)
    out = (o1 * w1 + o2 * w2) / (w1 + w2)
    shared.calls += 1
    return out.reshape(b, h, s, d).transpose(1, 2).to(query.dtype).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


@contextmanager
def use_shared_prefix(model: Any) -> Iterator[bool]:
    """Switch an SDPA model on CPU or CUDA to `attention` while inside; yields whether it was switched."""
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
    can_set = getattr(model, "_can_set_attn_implementation", lambda: False)
    # Asked first: set_attn_implementation only warns (once per call) on a model that cannot switch.
    if implementation != "sdpa" or model.device.type not in DEVICES or not can_set():
        yield False
        return
    _register()
    try:
        model.set_attn_implementation(NAME)
    except (ValueError, KeyError):  # a model that checks the name against its own list: keep the cache
        model.set_attn_implementation("sdpa")
        yield False
        return
    try:
        yield model.config._attn_implementation == NAME
    finally:
        model.set_attn_implementation("sdpa")
