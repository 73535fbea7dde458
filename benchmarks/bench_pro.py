"""MMLU-Pro whole-process speed: `python -m mmlu_track benchmark=mmlu_pro` in both log-likelihood
protocols (`formulation=leaderboard`, `formulation=category`) against lm-evaluation-harness 0.4.13's
own `leaderboard_mmlu_pro` task, each a fresh process from start to exit, on the same fp32 weights
(the packaged SmolLM2's cached safetensors copy) and the same questions (the first `--per-category`
test questions of each category of a local MMLU-Pro copy, written to a temporary folder with the
whole validation split), rounds interleaved, in one invocation.

    python benchmarks/bench_pro.py --data ../shared/data/mmlu-pro --lm-eval-python /path/to/venv/bin/python

`--lm-eval-python`: an interpreter with `lm-eval==0.4.13` installed (not a project dependency; by
default this one). Prints each path's wall seconds per round and the ratio lm-eval / mmlu_track of the
fastest rounds, for each protocol (`leaderboard` is the same prompts as lm-eval's, byte for byte).
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

from bench_process import packaged_dirs, timed  # noqa: E402


def write_subset(data: Path, per_category: int, out: Path) -> int:
    """`out`/test.jsonl (the first `per_category` test rows of each category, in file order) and the
    whole validation split; the number of test rows written."""
    rows = [
        json.loads(line) for line in (data / "test.jsonl").read_text().split("\n") if line.strip()
    ]  # not splitlines(): U+2028 in a question
    seen: dict[str, int] = {}
    kept = []
    for row in rows:
        if seen.get(row["category"], 0) < per_category:
            seen[row["category"]] = seen.get(row["category"], 0) + 1
            kept.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (out / "validation.jsonl").write_text((data / "validation.jsonl").read_text())
    return len(kept)


def run_mmlu_track(protocol: str, subset: Path, tmp: Path, n: int) -> dict[str, Any]:
    """One evaluation of the subset in `protocol`, a fresh process; its wall seconds and accuracy."""
    out = tmp / f"mmlu_track-{protocol}-{n}"
    cmd = [
        sys.executable, "-m", "mmlu_track", "benchmark=mmlu_pro", "data=mmlu_pro_local", f"data.path={subset}",
        f"formulation={protocol}", "dtype=float32", "device=cpu", "tracking=sql_only",
        f"tracking.db_url=sqlite:///{tmp / 'bench.db'}", "tracking.resume=false", f"hydra.run.dir={out}",
    ]  # fmt: skip
    wall = timed(cmd, tmp, f"mmlu_track {protocol}")
    doc = json.loads((out / "results.json").read_text())
    return {"path": f"mmlu_track {protocol}", "wall_s": wall, "scoring_s": doc["timing"]["scoring_s"],
            "accuracy": doc["scores"]["micro"]["acc"]}  # fmt: skip


def lm_eval_task(python: str, subset: Path, tmp: Path) -> Path:
    """lm-eval's own leaderboard_mmlu_pro task definition, pointed at the subset's files."""
    find = "import lm_eval, pathlib; print(pathlib.Path(lm_eval.__file__).parent)"
    package = Path(
        subprocess.run([python, "-c", find], capture_output=True, text=True, check=True).stdout.strip()
    )
    task = package / "tasks" / "leaderboard" / "mmlu_pro"
    folder = tmp / "task"
    folder.mkdir()
    yaml = (
        (task / "mmlu_pro.yaml").read_text().replace("dataset_path: TIGER-Lab/MMLU-Pro", "dataset_path: json")
    )
    files = "".join(f"    {split}: {subset / f'{split}.jsonl'}\n" for split in ("test", "validation"))
    (folder / "mmlu_pro.yaml").write_text(yaml + f"dataset_kwargs:\n  data_files:\n{files}")
    (folder / "utils.py").write_text((task / "utils.py").read_text())
    return folder


def run_lm_eval(python: str, task: Path, dirs: tuple[Path, Path], tmp: Path, n: int) -> dict[str, Any]:
    """lm-eval's leaderboard_mmlu_pro on the subset, a fresh process: its wall seconds and accuracy."""
    tok_dir, model_dir = dirs
    out = tmp / f"lm-eval-{n}"
    cmd = [
        python, "-m", "lm_eval", "--model", "hf",
        "--model_args", f"pretrained={model_dir},tokenizer={tok_dir},dtype=float32",
        "--tasks", "leaderboard_mmlu_pro", "--include_path", str(task), "--batch_size", "8",
        "--device", "cpu", "--output_path", str(out),
    ]  # fmt: skip
    wall = timed(cmd, tmp, "lm_eval")
    (results,) = out.rglob("results_*.json")
    acc = json.loads(results.read_text())["results"]["leaderboard_mmlu_pro"]["acc,none"]
    return {"path": "lm-eval leaderboard_mmlu_pro", "wall_s": wall, "accuracy": acc}


def main() -> None:
    """Time the three paths, rounds interleaved; print each round and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "mmlu-pro")
    parser.add_argument("--per-category", type=int, default=5, help="test questions per category")
    parser.add_argument("--lm-eval-python", default=sys.executable, help="an interpreter with lm-eval 0.4.13")
    parser.add_argument(
        "--repeat", type=int, default=2, help="interleaved rounds; each path's fastest counts"
    )
    args = parser.parse_args()

    dirs = packaged_dirs()
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_pro_") as name:
        tmp = Path(name)
        count = write_subset(args.data, args.per_category, tmp / "subset")
        print(f"{count} test questions ({args.per_category} per category), 5-shot, SmolLM2-135M fp32, CPU")
        task = lm_eval_task(args.lm_eval_python, tmp / "subset", tmp)
        for n in range(args.repeat):
            rows = [
                run_mmlu_track("leaderboard", tmp / "subset", tmp, n),
                run_mmlu_track("category", tmp / "subset", tmp, n),
                run_lm_eval(args.lm_eval_python, task, dirs, tmp, n),
            ]
            for row in rows:
                best[row["path"]] = min(best.get(row["path"], float("inf")), row["wall_s"])
                shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
                print(f"round {n + 1}: {json.dumps(shown)}", flush=True)
    theirs = best["lm-eval leaderboard_mmlu_pro"]
    for protocol in ("leaderboard", "category"):
        ours = best[f"mmlu_track {protocol}"]
        print(
            f"fastest rounds: lm-eval {theirs:.1f} s, mmlu_track {protocol} {ours:.1f} s: {theirs / ours:.2f}x"
        )


if __name__ == "__main__":
    main()
