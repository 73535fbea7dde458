"""`model=fake` (issue 87, its first part): a backend with no weights and no torch that answers as the
others do — letter log-probs a probability could have, generations the extraction reads — the same
for the same prompt in every run, other for other prompts, moved a little by a lower dtype."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from mmlu_track.eval import fake, load
from mmlu_track.eval.backend import GenerationRequest, LetterRequest

from ..conftest import ROOT, CliResult, compose_eval

Cli = Callable[..., CliResult]


def _backend(*overrides: str) -> fake.FakeBackend:
    return fake.load_backend(compose_eval(["model=fake", *overrides]))


def test_letter_log_probs_are_a_distribution_over_the_letters_and_repeat_exactly() -> None:
    lm = _backend()
    prompts = [LetterRequest(f"Question {i}?\nAnswer:", options=4 + i % 7) for i in range(50)]
    scores = lm.score_letters(prompts, lambda n: None)
    for request, score in zip(prompts, scores, strict=True):
        assert score.logprobs is not None
        assert len(score.logprobs) == request.options
        assert all(math.isfinite(v) and v <= 0 for v in score.logprobs)
        assert abs(math.fsum(math.exp(v) for v in score.logprobs) - 1) < 1e-12
        assert score.prediction == max(range(request.options), key=lambda i: (score.logprobs[i], -i))
        assert score.n_tokens == len(request.text.encode())
    assert _backend().score_letters(prompts, lambda n: None) == scores  # another instance, the same
    assert len({s.prediction for s in scores}) > 2  # other prompts, other answers
    other = _backend("model.tiny_seed=1").score_letters(prompts, lambda n: None)
    assert [s.logprobs for s in other] != [s.logprobs for s in scores]
    lower = _backend("dtype=bfloat16").score_letters(prompts, lambda n: None)
    moved = sum(a.logprobs != b.logprobs for a, b in zip(scores, lower, strict=True))
    assert moved == len(prompts)
    assert (
        0 < sum(a.prediction != b.prediction for a, b in zip(scores, lower, strict=True)) < len(prompts) // 2
    )


def test_generations_are_read_by_the_runs_own_extraction() -> None:
    requests = [GenerationRequest(f"Question {i}?\nAnswer:") for i in range(60)]
    first = _backend("scoring=generate").generate(requests, lambda n: None)
    assert all(s.generated is not None and len(s.generated) == 2 for s in first)
    assert any(s.prediction is None for s in first)  # now and then an answer that is no letter
    pattern = _backend("scoring=generate_pattern").generate(requests, lambda n: None)
    assert [s.prediction for s in pattern] == [s.prediction for s in first]
    pro = [
        "benchmark=mmlu_pro",
        "data=mmlu_pro_local",
        "data.path=/d",
        "scoring=cot",
        "formulation=cot_official",
    ]
    cot = _backend(*pro).generate(requests, lambda n: None)
    assert all(s.finish == "stop" and s.generated and "Question:" not in s.generated for s in cot)
    assert {s.extraction for s in cot} == {"answer is", "none"}


def test_it_pins_its_weights_and_the_pipeline_never_imports_torch(tmp_path: Path) -> None:
    cfg = compose_eval(["model=fake"])
    assert load.pinned(cfg) == fake.pinned(cfg)
    assert not load.in_process(cfg)  # no torch to seed, no CPU threads to choose
    code = (
        "import sys\n"
        "from tests.conftest import compose_eval\n"
        "from mmlu_track.pipeline.evaluate import QUIET, run\n"
        f"cfg = compose_eval(['model=fake', 'limit=1', 'tracking=sql_only', 'tracking.db_url=sqlite:///{tmp_path}/s.db'])\n"
        f"run(cfg, __import__('pathlib').Path({str(tmp_path / 'o')!r}), display=QUIET)\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip().splitlines()[-1] == "[]"


def test_the_commands_run_on_it_end_to_end(cli: Cli, tmp_path: Path) -> None:
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"
    common = ["model=fake", "limit=3", "tracking=sql_only", db]
    first = cli("eval", *common, cwd=tmp_path)
    assert first.code == 0, first.err
    assert "already evaluated" in cli("eval", *common, cwd=tmp_path).out  # pinned before loading: reused
    lower = cli("eval", *common, "dtype=bfloat16", cwd=tmp_path)
    assert lower.code == 0, lower.err
    gate = cli("compare", "baseline=fake-model", "candidate=fake-model", "tracking=sql_only", db,
               f"hydra.run.dir={tmp_path / 'c'}", cwd=tmp_path)  # fmt: skip
    assert gate.code in (0, 1), gate.err
    assert "dtype auto (float32) → bfloat16" in gate.out
