"""MMLU-Pro chain-of-thought speed: `python -m mmlu_track benchmark=mmlu_pro scoring=cot
formulation=cot_lm_eval` against lm-evaluation-harness 0.4.13's own `mmlu_pro` tasks (the same
prompts, byte for byte), each a fresh process from start to exit, on the same fp32 weights (the
packaged SmolLM2's cached safetensors copy), the same questions (the first `--per-category` test
questions of each category of a local MMLU-Pro copy) and the same `max_gen_toks`, rounds interleaved.

    python benchmarks/bench_cot.py --data ../shared/data/mmlu-pro --lm-eval-python /path/to/venv/bin/python

Prints each path's wall seconds, the tokens generated (mmlu_track's own count; lm-eval's generations
counted with the same tokenizer) and generated tokens per second of the whole process, and the ratio
lm-eval / mmlu_track of the fastest rounds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_pro import write_subset  # noqa: E402
from bench_process import packaged_dirs, timed  # noqa: E402

CATEGORIES = ("biology", "business", "chemistry", "computer science", "economics", "engineering", "health",
              "history", "law", "math", "other", "philosophy", "physics", "psychology")  # fmt: skip


def run_mmlu_track(subset: Path, tmp: Path, n: int, max_new: int) -> dict[str, Any]:
    """One chain-of-thought evaluation of the subset, a fresh process: wall seconds, tokens, accuracy."""
    out = tmp / f"mmlu_track-{n}"
    cmd = [
        sys.executable, "-m", "mmlu_track", "benchmark=mmlu_pro", "data=mmlu_pro_local", f"data.path={subset}",
        "scoring=cot", "formulation=cot_lm_eval", f"scoring.max_new_tokens={max_new}", "dtype=float32",
        "device=cpu", "tracking=sql_only", f"tracking.db_url=sqlite:///{tmp / 'bench.db'}",
        "tracking.resume=false", f"hydra.run.dir={out}",
    ]  # fmt: skip
    wall = timed(cmd, tmp, "mmlu_track")
    doc = json.loads((out / "results.json").read_text())
    tokens = doc["reasoning"]["tokens"]
    return {"path": "mmlu_track cot_lm_eval", "wall_s": wall, "scoring_s": doc["timing"]["scoring_s"],
            "tokens": tokens, "tokens_per_s": tokens / wall, "accuracy": doc["scores"]["micro"]["acc"]}  # fmt: skip


def lm_eval_tasks(python: str, subset: Path, tmp: Path) -> Path:
    """lm-eval's own mmlu_pro task definitions, pointed at the subset's files."""
    find = "import lm_eval, pathlib; print(pathlib.Path(lm_eval.__file__).parent)"
    package = Path(
        subprocess.run([python, "-c", find], capture_output=True, text=True, check=True).stdout.strip()
    )
    task = package / "tasks" / "mmlu_pro"
    folder = tmp / "tasks"
    folder.mkdir()
    files = "".join(f"    {split}: {subset / f'{split}.jsonl'}\n" for split in ("test", "validation"))
    template = (task / "_default_template_yaml").read_text()
    template = template.replace("dataset_path: TIGER-Lab/MMLU-Pro", "dataset_path: json")
    (folder / "_default_template_yaml").write_text(template + f"dataset_kwargs:\n  data_files:\n{files}")
    for category in CATEGORIES:
        name = f"mmlu_pro_{category.replace(' ', '_')}.yaml"
        (folder / name).write_text((task / name).read_text())
    (folder / "utils.py").write_text((task / "utils.py").read_text())
    return folder


def run_lm_eval(python: str, task: Path, tmp: Path, n: int, max_new: int) -> dict[str, Any]:
    """lm-eval's mmlu_pro tasks on the subset, a fresh process: wall seconds, tokens, accuracy."""
    from transformers import AutoTokenizer

    tok_dir, model_dir = packaged_dirs()
    out = tmp / f"lm-eval-{n}"
    names = ",".join(f"mmlu_pro_{c.replace(' ', '_')}" for c in CATEGORIES)
    cmd = [
        python, "-m", "lm_eval", "--model", "hf",
        "--model_args", f"pretrained={model_dir},tokenizer={tok_dir},dtype=float32",
        "--tasks", names, "--include_path", str(task), "--batch_size", "8", "--device", "cpu",
        "--gen_kwargs", f"max_gen_toks={max_new}", "--log_samples", "--output_path", str(out),
    ]  # fmt: skip
    wall = timed(cmd, tmp, "lm_eval")
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    tokens = right = total = 0
    for path in out.rglob("samples_*.jsonl"):
        for line in path.read_text().split("\n"):
            if line.strip():
                doc = json.loads(line)
                tokens += len(tokenizer(doc["resps"][0][0], add_special_tokens=False)["input_ids"])
                right += doc["filtered_resps"][0] == doc["target"]
                total += 1
    return {"path": "lm-eval mmlu_pro", "wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall,
            "accuracy": right / max(total, 1)}  # fmt: skip


def main() -> None:
    """Time both paths, rounds interleaved; print each round and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "mmlu-pro")
    parser.add_argument("--per-category", type=int, default=1, help="test questions per category")
    parser.add_argument("--max-gen-toks", type=int, default=256, help="both paths' generation limit")
    parser.add_argument("--lm-eval-python", default=sys.executable, help="an interpreter with lm-eval 0.4.13")
    parser.add_argument(
        "--repeat", type=int, default=1, help="interleaved rounds; each path's fastest counts"
    )
    args = parser.parse_args()
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_cot_") as name:
        tmp = Path(name)
        count = write_subset(args.data, args.per_category, tmp / "subset")
        print(
            f"{count} test questions, 5-shot chain of thought, max_gen_toks {args.max_gen_toks}, SmolLM2-135M fp32"
        )
        task = lm_eval_tasks(args.lm_eval_python, tmp / "subset", tmp)
        for n in range(args.repeat):
            for row in (
                run_mmlu_track(tmp / "subset", tmp, n, args.max_gen_toks),
                run_lm_eval(args.lm_eval_python, task, tmp, n, args.max_gen_toks),
            ):
                best[row["path"]] = min(best.get(row["path"], float("inf")), row["wall_s"])
                shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
                print(f"round {n + 1}: {json.dumps(shown)}", flush=True)
    theirs, ours = best["lm-eval mmlu_pro"], best["mmlu_track cot_lm_eval"]
    print(f"fastest rounds: lm-eval {theirs:.1f} s, mmlu_track {ours:.1f} s: {theirs / ours:.2f}x")


if __name__ == "__main__":
    main()
