"""Scoring time alone and beside busy processes, per thread setting: how a shared node slows a run.

Each setting runs the same evaluation (by default the default model, 5-shot, 10 questions of each
of 4 subjects; its own store, MLflow off) as a process of its own, quiet
and beside `--busy` processes that spin on a core each (`python -c "while True: pass"`, what other
jobs on a shared node look like to it). Printed: `scoring_s` from each run's results.json, per
setting and case, the ratios the targets are stated in, and whether each target holds:

- beside one busy process, `auto` at most 15 % slower than `threads=1`;
- quiet, `auto` at least 15 % faster than `threads=1` (at most 0.85 of its time);
- beside two busy processes, `auto` at most 3.2x its own quiet time.

All in one invocation (`--repeat` rounds, the median of each cell), so the ratios compare within
one machine state.

    python benchmarks/bench_contention.py                  # auto, 1, 2 threads × 0, 1, 2 busy
    python benchmarks/bench_contention.py --repeat 3 --busy 0 1
    python benchmarks/bench_contention.py --limit 2 --subjects all   # the quick preset (~100 s a run here)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SETTINGS = {"auto": ["threads=auto"], "1 thread": ["threads=1"], "2 threads": ["threads=2"]}


def _run(
    extra_env: dict[str, str],
    args: list[str],
    where: Path,
    common: list[str],
    *,
    preexec: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """One evaluation as its own process (`preexec`: run in the child before it starts, e.g. to
    join a cgroup); its results.json."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env |= extra_env
    out = where / f"run-{time.time_ns()}"
    cmd = [sys.executable, "-m", "mmlu_track", *common, *args, f"hydra.run.dir={out}"]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=where, preexec_fn=preexec)
    doc: dict[str, Any] = json.loads((out / "results.json").read_text())
    return doc


def _score(extra_env: dict[str, str], args: list[str], where: Path, common: list[str]) -> float:
    return float(_run(extra_env, args, where, common)["timing"]["scoring_s"])


def _beside(busy: int, score: Callable[[], float]) -> float:
    """`score()` while `busy` processes spin on a core each."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        return score()
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def _targets(t: dict[tuple[str, int], float]) -> list[str]:
    """Each target the issue states, with its figure and whether it holds (where both cells ran)."""
    out = []
    checks = [
        (("auto", 1), ("1 thread", 1), 1.15, "beside 1 busy: auto / threads=1 ≤ 1.15"),
        (("auto", 0), ("1 thread", 0), 0.85, "quiet: auto / threads=1 ≤ 0.85"),
        (("auto", 2), ("auto", 0), 3.2, "beside 2 busy: auto / auto quiet ≤ 3.2"),
    ]
    for a, b, bound, what in checks:
        if a in t and b in t:
            ratio = t[a] / t[b]
            out.append(f"{what}: {ratio:.2f} {'holds' if ratio <= bound else 'MISSED'}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--busy", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--subjects", default="[abstract_algebra,anatomy,astronomy,virology]")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; each cell is their median")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        common = [f"limit={args.limit}", f"subjects={args.subjects}", "tracking.mlflow=false",
                  f"tracking.db_url=sqlite:///{where / 'bench.db'}", "tracking.resume=false"]  # fmt: skip
        _score({}, ["threads=auto"], where, common)  # warm: the model converted and cached once
        seen: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.repeat):
            for busy in args.busy:
                for name in args.settings:
                    took = _beside(busy, lambda name=name: _score({}, SETTINGS[name], where, common))
                    seen.setdefault((name, busy), []).append(took)
        t = {cell: statistics.median(v) for cell, v in seen.items()}
        print(
            f"cores {len(os.sched_getaffinity(0))}, limit={args.limit} × subjects={args.subjects}, 5-shot, "
            f"median of {args.repeat}: scoring s (and × the same setting quiet)"
        )
        print("| setting | " + " | ".join(f"{b} busy" for b in args.busy) + " |")
        print("|---|" + "---:|" * len(args.busy))
        for name in args.settings:
            cells = [
                f"{t[name, b]:.1f} ({t[name, b] / t[name, args.busy[0]]:.2f}×)" if b != args.busy[0]
                else f"{t[name, b]:.1f}"
                for b in args.busy
            ]  # fmt: skip
            print(f"| {name} | " + " | ".join(cells) + " |")
        for line in _targets(t):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
