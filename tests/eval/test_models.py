"""The packaged SmolLM2-135M on a few real questions (slow: converts and runs a 135M model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from mmlu_track.eval import generate, models, prompts
from mmlu_track.eval.data import load_subjects
from mmlu_track.settings.config import ScoringConfig
from mmlu_track.settings.subjects import LETTERS

from ..conftest import compose_eval
from .conftest import generate_scores, logprob_scores

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm() -> Any:
    return models.load_model(compose_eval(["device=cpu"]))


def test_packaged_model_identity(smollm: Any) -> None:
    info = smollm.info
    assert info.n_parameters == pytest.approx(134.5e6, rel=0.01)
    assert info.vocab_size == 49152
    assert info.add_bos is False
    assert len(info.weights_sha256 or "") == 64


def test_real_questions_batched_equal_direct(smollm: Any) -> None:
    cfg = compose_eval([])
    data = load_subjects(cfg.data, ["abstract_algebra", "marketing"])
    texts = [
        prompts.render(f, s, d.dev[:k], q)
        for (s, d) in data.items()
        for q in d.test[:3]
        for f, k in (("harness", 5), ("original", 0))
    ]
    batched = logprob_scores(smollm, texts, ScoringConfig(method="logprob"), 4, lambda _: None)
    for text, score in zip(texts, batched, strict=True):
        ids = smollm.encode(text)
        with torch.inference_mode():
            lp = torch.log_softmax(smollm.model(torch.tensor([ids])).logits[0, -1].float(), -1)
        direct = [float(lp[smollm.encode(f"{text} {x}")[-1]]) for x in LETTERS[:4]]
        np.testing.assert_allclose(score.logprobs, direct, atol=1e-4)  # type: ignore[arg-type]
    # A real model puts real mass on the letters: together far above a random token's share.
    first = batched[0].logprobs
    assert first is not None
    assert float(np.logaddexp.reduce(first)) > -3.0


@pytest.mark.parametrize("formulation", ["original", "harness", "question"])
def test_prefix_cache_equals_plain_on_real_questions(smollm: Any, formulation: str) -> None:
    cfg = compose_eval([])
    data = load_subjects(cfg.data, ["high_school_us_history", "college_physics"])
    for subject, d in data.items():
        for k in (0, 5):
            ps = [prompts.fit(formulation, d.dev[:k], q, lambda _: True) for q in d.test[:4]]
            texts, prefixes = [p.text for p in ps], [p.prefix for p in ps]
            plain = logprob_scores(
                smollm,
                texts,
                ScoringConfig("logprob", prefix_cache=False),
                2,
                lambda _: None,
                prefixes=prefixes,
            )
            cached = logprob_scores(
                smollm,
                texts,
                ScoringConfig("logprob", prefix_cache=True),
                3,
                lambda _: None,
                prefixes=prefixes,
            )
            assert [s.prediction for s in cached] == [s.prediction for s in plain], (subject, k)
            for a, b in zip(cached, plain, strict=True):
                np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)  # type: ignore[arg-type]
                assert not a.prefix_fallback


@pytest.mark.parametrize("rule", ["decided", "never"])
def test_generation_equal_across_batching_and_prefix_on_real_questions(
    smollm: Any, rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if rule == "never":  # every row decodes all max_new_tokens: the decode steps on the shared prefix
        monkeypatch.setattr(generate, "_stops", lambda lm, tokens: False)
    data = load_subjects(compose_eval([]).data, ["abstract_algebra", "marketing"])  # short prompts
    ps = [prompts.fit("original", d.dev[:5], q, lambda _: True) for d in data.values() for q in d.test[:4]]
    texts, prefixes = [p.text for p in ps], [p.prefix for p in ps]
    runs = {
        (cache, b): generate_scores(
            smollm, texts, ScoringConfig("generate", prefix_cache=cache), b, lambda _: None, prefixes=prefixes
        )
        for cache in (False, True)
        for b in (1, 8)
    }
    reference = runs[(False, 1)]
    for scores in runs.values():
        assert [s.generated for s in scores] == [s.generated for s in reference]
        assert [s.prediction for s in scores] == [s.prediction for s in reference]
        assert not any(s.prefix_fallback for s in scores)
    if rule == "decided":  # a real model answers with a letter straight away
        assert sum(s.prediction is not None for s in reference) >= 6


def test_out_of_memory_while_loading_weights_is_said_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broad `except` read an out-of-memory error as advice about the model's name (issue 86)."""
    import transformers

    from mmlu_track.eval.backend import ModelError

    def no_memory(*args: Any, **kwargs: Any) -> Any:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: object())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_memory)
    cfg = compose_eval(["model=hf_hub", "model.name_or_path=org/some-8b", "device=cpu"])
    with pytest.raises(ModelError) as got:
        models.LOADERS["hub"](cfg.model, cfg, torch.bfloat16)
    said = str(got.value)
    assert said.startswith("out of memory loading the weights of org/some-8b in bfloat16 (OutOfMemoryError)")
    assert "hub id" not in said
