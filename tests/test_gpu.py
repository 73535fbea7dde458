"""CUDA paths: run with `python -m pytest -m gpu` on a machine with a GPU (skipped without one)."""

from __future__ import annotations

import numpy as np
import pytest

from mmlu_track.config import ScoringConfig
from mmlu_track.eval import models, prompts
from mmlu_track.eval.data import load_subjects
from mmlu_track.eval.generate import score_generate
from mmlu_track.eval.scoring import score_logprob

from .conftest import compose_eval

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_scores_are_batch_invariant(dtype: str) -> None:
    cfg = compose_eval(["model=tiny", "device=cuda", f"dtype={dtype}"])
    lm = models.load(cfg)
    assert lm.info.device == "cuda"
    data = load_subjects(cfg.data, ["anatomy"])["anatomy"]
    texts = [prompts.render("harness", "anatomy", data.dev[: i % 6], q) for i, q in enumerate(data.test[:12])]
    one = score_logprob(lm, texts, ScoringConfig(method="logprob"), 1, lambda _: None)
    many = score_logprob(lm, texts, ScoringConfig(method="logprob"), 12, lambda _: None)
    tol = 1e-4 if dtype == "float32" else 5e-2
    for a, b in zip(one, many, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=tol)  # type: ignore[arg-type]


def test_cuda_generation_equal_with_and_without_the_prefix() -> None:
    # On CUDA the prefix's cache is expanded across the batch ("cache"), decode steps appending to it.
    cfg = compose_eval(["model=tiny", "device=cuda", "dtype=float32"])
    lm = models.load(cfg)
    data = load_subjects(cfg.data, ["anatomy"])["anatomy"]
    ps = [prompts.fit("harness", data.dev[:5], q, lambda _: True) for q in data.test[:12]]
    texts, prefixes = [p.text for p in ps], [p.prefix for p in ps]
    runs = [
        score_generate(
            lm, texts, ScoringConfig("generate", prefix_cache=c), b, lambda _: None, prefixes=prefixes
        )
        for c in (False, True)
        for b in (1, 8)
    ]
    for scores in runs:
        assert [s.generated for s in scores] == [s.generated for s in runs[0]]
        assert not any(s.prefix_fallback for s in scores)
