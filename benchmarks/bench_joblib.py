"""Shards on one host, launched for real by Hydra's joblib launcher: do they oversubscribe it?

In one invocation, the same run (the default model, 5-shot, `--subjects` x `--limit`, MLflow off,
a store of its own each time) as:
- one process (`threads=auto`: every CPU this process may use);
- `--shards` shards launched at once by `-m hydra/launcher=joblib hydra.launcher.n_jobs=N`, with
  `threads=auto` (the CPUs divided among the shards joblib runs at once);
- the same launch with `threads=<CPUs>` in each shard: what torch's default (one thread per core
  of the host) gave every shard before `threads=auto` divided them.

Printed: each path's wall seconds (the whole command, start to exit) and its ratio to the one
process. On one host sharding cannot beat one process that already uses every core: what it must
not do is lose to it by more than its per-shard start-up.

    python benchmarks/bench_joblib.py                   # 4 subjects x 20, 2 shards
    python benchmarks/bench_joblib.py --limit 10 --shards 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBJECTS = "abstract_algebra,college_physics,high_school_us_history,marketing"


def _wall(where: Path, extra: list[str], name: str) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    db = f"tracking.db_url=sqlite:///{where / f'{name}.db'}"
    flags = [a for a in extra if a.startswith("-")]  # --multirun goes before every override
    cmd = [sys.executable, "-m", "mmlu_track", *flags, "device=cpu", "tracking.mlflow=false", db]
    cmd += [a for a in extra if not a.startswith("-")]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", default=SUBJECTS)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0))
    common = [f"subjects=[{args.subjects}]", f"limit={args.limit}"]
    launch = ["-m", "hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.shards}", f"shards={args.shards}",
              f"shard=range({args.shards})"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_joblib_") as name:
        where = Path(name)
        _wall(
            where, [f"subjects=[{args.subjects}]", "limit=1", f"hydra.run.dir={where / 'warm'}"], "warm"
        )  # the model cached once
        rows = [
            ("1 process, threads=auto", _wall(where, [*common, f"hydra.run.dir={where / 'one'}"], "one")),
            (
                f"joblib {args.shards} shards, threads=auto",
                _wall(where, [*launch, *common, "threads=auto", f"hydra.sweep.dir={where / 'auto'}"], "auto"),
            ),
            (
                f"joblib {args.shards} shards, threads={cpus} each",
                _wall(
                    where, [*launch, *common, f"threads={cpus}", f"hydra.sweep.dir={where / 'all'}"], "all"
                ),
            ),
        ]
    one = rows[0][1]
    print(f"{cpus} CPUs, {args.limit} x {args.subjects.count(',') + 1} subjects, 5-shot, whole commands")
    print("| path | wall s | vs 1 process |\n|---|---:|---:|")
    for label, wall in rows:
        print(f"| {label} | {wall:.1f} | {wall / one:.2f}× |")


if __name__ == "__main__":
    main()
