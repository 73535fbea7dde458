"""CUDA paths (`python -m pytest -m gpu`; conftest.py skips them without CUDA), and the GPU check's
CPU dry run.

The CUDA tests load a tiny seeded random llama with SmolLM2's tokenizer through the project's loader
(`model=hf_hub` on a folder written here): on the lent GPU machine the packaged GGUF that
`model=tiny` needs is absent, and `benchmarks/gpu_carry.sh` carries the tokenizer instead
(`.gpu_carry/tokenizer`; elsewhere the project's own conversion serves). The dry-run test, in the
default run, keeps `benchmarks/gpu_check.py` working on machines without CUDA.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from mmlu_track.eval import models, prompts
from mmlu_track.eval.data import load_subjects
from mmlu_track.settings.config import EvalConfig, ScoringConfig

from ..conftest import compose_eval
from .conftest import generate_scores, logprob_scores

ROOT = Path(__file__).resolve().parents[2]


def _quiet(_: int) -> None:
    pass


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    """model=tiny's architecture and init (2 layers, hidden 64), saved as a model folder."""
    gpu_check = _gpu_check()
    tok, _ = gpu_check.tokenizer(ROOT / ".gpu_carry", str(cache_dir))
    folder = tmp_path_factory.mktemp("tiny-random-llama")
    gpu_check.save_random(gpu_check.llama(gpu_check.CPU_TINY, tok, 0.2, True), tok, folder)
    return folder


def _load(folder: Path, dtype: str) -> tuple[models.LoadedModel, EvalConfig]:
    cfg = compose_eval(["model=hf_hub", f"model.name_or_path={folder}", "device=cuda", f"dtype={dtype}"])
    lm = models.load_model(cfg)
    assert lm.info.device == "cuda"
    assert lm.info.dtype == dtype
    return lm, cfg


def _prompts(cfg: EvalConfig) -> tuple[list[str], list[str]]:
    """12 anatomy prompts with 1-5 shots: several prefixes, lengths that pad differently."""
    data = load_subjects(cfg.data, ["anatomy"])["anatomy"]
    ps = [
        prompts.fit("harness", data.dev[: 1 + i % 5], q, lambda _: True) for i, q in enumerate(data.test[:12])
    ]
    return [p.text for p in ps], [p.prefix for p in ps]


def _logprobs(
    lm: models.LoadedModel, texts: list[str], prefixes: list[str], prefix: bool, rows: int
) -> np.ndarray:
    cfg = ScoringConfig("logprob", prefix_cache=prefix)
    scores = logprob_scores(lm, texts, cfg, rows, _quiet, prefixes=prefixes)
    assert not any(s.prefix_fallback for s in scores)
    return np.array([s.logprobs for s in scores], dtype=np.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_logprobs_agree_across_batches_and_the_prefix(tiny_dir: Path, dtype: str) -> None:
    # On CUDA the prefix's cache is expanded across the batch ("cache"); plain batches are left-padded.
    ref, cfg = _load(tiny_dir, "float32")
    texts, prefixes = _prompts(cfg)
    exact = _logprobs(ref, texts, prefixes, False, 1)
    lm = ref if dtype == "float32" else _load(tiny_dir, dtype)[0]
    one = _logprobs(lm, texts, prefixes, False, 1)
    # bf16: as benchmarks/gpu_check.py, 3x the rounding error this model's plain bf16 run carries.
    tol = 1e-4 if dtype == "float32" else max(3 * float(np.abs(one - exact).max()), 1e-3)
    for other in (_logprobs(lm, texts, prefixes, False, 12), _logprobs(lm, texts, prefixes, True, 12)):
        np.testing.assert_allclose(other, one, atol=tol, rtol=0)
        if dtype == "float32":
            assert list(other.argmax(1)) == list(one.argmax(1))


@pytest.mark.gpu
def test_cuda_generation_equal_with_and_without_the_prefix(tiny_dir: Path) -> None:
    # Decode steps append to each row's copy of the expanded prefix cache; rows that stop leave it.
    lm, cfg = _load(tiny_dir, "float32")
    texts, prefixes = _prompts(cfg)
    runs = [
        generate_scores(lm, texts, ScoringConfig("generate", prefix_cache=c), b, _quiet, prefixes=prefixes)
        for c in (False, True)
        for b in (1, 8)
    ]
    for scores in runs:
        assert [s.generated for s in scores] == [s.generated for s in runs[0]]
        assert not any(s.prefix_fallback for s in scores)


def test_gpu_check_dry_run_agrees_on_cpu(tmp_path: Path, cache_dir: Path) -> None:
    """The GPU check's CPU dry run at its smallest: every comparison made, every one agreeing."""
    out = tmp_path / "gpu_check.json"
    argv = ["--dry-run", "--subjects", "2", "--limit", "1", "--speed-limit", "1", "--plain-limit", "1"]
    code = _gpu_check().main([*argv, "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["cuda"] is False
    assert report["correctness"]["ok"], report["correctness"]
    assert report["ok"], report["speed"]
    assert code == 0
    f32 = report["correctness"]["float32"]
    assert f32["oom_backoff"]["backoffs"] == 1
    assert f32["prefix_vs_plain"]["max_abs_diff"] <= 1e-4
    assert report["speed"]["prefix_cached"]["full_mmlu"]["questions"] == 14_042
