"""Whole-process speed: `python -m mmlu_track` against lm-evaluation-harness 0.4.13's `lm_eval` CLI
(HF backend), each a fresh process from start to exit, on the same fp32 weights (the packaged
SmolLM2's cached safetensors copy), questions (4 subjects x 20, seeded as `limit` picks them), shots
(the dev split's first k) and prompt (harness formulation), in one invocation, rounds interleaved.

    pip install lm-eval==0.4.13                  # not a project dependency
    python benchmarks/bench_process.py           # --limit 20 --k 5 --repeat 2

What a user waits for is the whole process: imports, config, the store, the model load and the
results table count as much as scoring. Prints per round each path's wall seconds, mmlu_track's
own split (`timing` in results.json: model load, scoring, and the rest of the process), and the
ratio lm-eval / mmlu_track of each path's fastest round. Without lm-eval installed it times
mmlu_track alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
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


def _questions(args: argparse.Namespace) -> dict[str, Any]:
    from mmlu_track.eval.data import load_subjects, subsample
    from mmlu_track.settings.config import DataConfig

    data = load_subjects(DataConfig(name="mmlu", source="packaged"), args.subjects.split(","))
    return {s: subsample(d.test, args.limit, args.seed) for s, d in data.items()}


def timed(cmd: list[str], cwd: Path, what: str) -> float:
    """The wall seconds of one whole process; its failure ends the benchmark with its stderr."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stderr[-3000:]}")
    return wall


def packaged_dirs() -> tuple[Path, Path]:
    """The packaged SmolLM2's converted tokenizer and model folders (the default model's cache)."""
    from mmlu_track.eval import models
    from mmlu_track.settings.config import ModelConfig

    package, filename = models.PACKAGED_SMOLLM2
    default = ModelConfig(name="SmolLM2-135M-Instruct", source="gguf", package=package, gguf_file=filename)
    return models.converted_dirs(default, str(Path("~/.cache/mmlu_track").expanduser()))


def run_mmlu_track(args: argparse.Namespace, tmp: Path, n: int) -> dict[str, Any]:
    out = tmp / f"mmlu_track-{n}"
    cmd = [
        sys.executable, "-m", "mmlu_track", "formulation=harness", f"k={args.k}", f"limit={args.limit}",
        f"subjects=[{args.subjects}]", f"seed={args.seed}", "dtype=float32", "tracking=sql_only",
        f"tracking.db_url=sqlite:///{tmp / 'bench.db'}", "tracking.resume=false", f"hydra.run.dir={out}",
    ]  # fmt: skip
    wall = timed(cmd, tmp, "mmlu_track")
    doc = json.loads((out / "results.json").read_text())
    t = doc["timing"]
    return {
        "path": "mmlu_track", "wall_s": wall, "model_load_s": t["model_load_s"], "scoring_s": t["scoring_s"],
        "rest_s": wall - t["model_load_s"] - t["scoring_s"], "accuracy": doc["scores"]["micro"]["acc"],
    }  # fmt: skip


def run_harness(
    args: argparse.Namespace, tmp: Path, names: list[str], dirs: tuple[Path, Path]
) -> dict[str, Any]:
    tok_dir, model_dir = dirs
    out = tmp / "harness-out"
    cmd = [
        sys.executable, "-m", "lm_eval", "--model", "hf",
        "--model_args", f"pretrained={model_dir},tokenizer={tok_dir},dtype=float32",
        "--tasks", ",".join(names), "--include_path", str(tmp), "--num_fewshot", str(args.k),
        "--batch_size", "8", "--device", "cpu", "--output_path", str(out),
    ]  # fmt: skip
    return {"path": "lm-eval-harness", "wall_s": timed(cmd, tmp, "lm_eval")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", default=DEFAULT_SUBJECTS, help="comma-separated")
    parser.add_argument("--limit", type=int, default=20, help="questions per subject (seeded sample)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--repeat", type=int, default=2, help="interleaved rounds; each path's fastest counts"
    )
    args = parser.parse_args()

    dirs = packaged_dirs()
    harness = importlib.util.find_spec("lm_eval") is not None
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_process_") as name:
        tmp = Path(name)
        names = harness_tasks(_questions(args), tmp) if harness else []
        for n in range(args.repeat):
            rows = [run_mmlu_track(args, tmp, n)]
            if harness:
                rows.append(run_harness(args, tmp, names, dirs))
            for row in rows:
                best[row["path"]] = min(best.get(row["path"], float("inf")), row["wall_s"])
                print(f"round {n + 1}: " + json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                                      for k, v in row.items()}), flush=True)  # fmt: skip
    if harness:
        ratio = best["lm-eval-harness"] / best["mmlu_track"]
        print(f"fastest rounds: lm-eval {best['lm-eval-harness']:.1f} s, mmlu_track {best['mmlu_track']:.1f} s: "
              f"{ratio:.2f}x")  # fmt: skip
    else:
        print("lm-eval is not installed (pip install lm-eval==0.4.13): mmlu_track timed alone")


if __name__ == "__main__":
    main()
