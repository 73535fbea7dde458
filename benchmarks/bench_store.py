"""A store of many runs, and what the read commands cost on it (CPU seconds, this process).

Builds a SQLite store of `--runs` finished runs written straight into it (every subject, `--per`
questions each, a full record: `tests.conftest.synthetic_run`), then times `runs list` (its default
50 rows, and every run) and `runs show` of one run, each the fastest of `--repeat`.

    python benchmarks/bench_store.py                 # 100 runs x 57 subjects x 10 questions
    python benchmarks/bench_store.py --runs 1000

The compare of two full-MMLU runs: `benchmarks/bench_compare.py`. Still to come (issue 51):
full-MMLU rows per run (14,042) at 1,000 runs, and PostgreSQL.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mmlu_track.commands.runs import main as runs_main  # noqa: E402
from mmlu_track.settings.subjects import SUBJECTS  # noqa: E402
from mmlu_track.store.sql import SqlStore  # noqa: E402
from tests.conftest import synthetic_run  # noqa: E402


def _cpu(call: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        for _ in range(repeat):
            start = time.process_time()
            call()
            best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--per", type=int, default=10, help="questions per subject in each run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_store_") as tmp:
        url = f"sqlite:///{Path(tmp) / 'store.db'}"
        store = SqlStore(url)
        correct = {s: [True, False] * (args.per // 2) + [True] * (args.per % 2) for s in SUBJECTS}
        start = time.perf_counter()
        ids = [synthetic_run(store, f"model-{i % 10}", correct) for i in range(args.runs)]
        store.close()
        print(f"{args.runs} runs x {len(SUBJECTS)} subjects x {args.per} questions built in "
              f"{time.perf_counter() - start:.0f} s")  # fmt: skip
        rows = [
            ("runs list (50 rows)", lambda: runs_main(["--db", url, "list"])),
            (
                f"runs list --limit {args.runs}",
                lambda: runs_main(["--db", url, "list", "--limit", str(args.runs)]),
            ),
            ("runs show (one run)", lambda: runs_main(["--db", url, "show", ids[0]])),
        ]
        print("| command | CPU s |\n|---|---:|")
        for label, call in rows:
            print(f"| {label} | {_cpu(call, args.repeat):.3f} |", flush=True)


if __name__ == "__main__":
    main()
