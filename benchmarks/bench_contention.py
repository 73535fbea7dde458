"""Scoring time alone and beside busy processes, per thread setting: how a shared node slows a run.

Each setting runs the same evaluation (the default model, 5-shot, `--subjects` × `--limit`
questions, its own store, MLflow off) as a process of its own, first alone and then beside `--busy`
processes that spin on a core each (`python -c "while True: pass"`, what other jobs on a shared
node look like to it). Printed per setting: `scoring_s` from the run's results.json, alone and
contended, and their ratio (the fair share on a machine with c cores and b busy processes is
(b + 1)/c of it... at best; 3× for 2 busy on 2 cores: ratio 1.5 of fair). All in one invocation, so
the ratios compare within one machine state.

    python benchmarks/bench_contention.py                               # auto, 1 thread, passive wait
    python benchmarks/bench_contention.py --settings auto --busy 2 --limit 20
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SETTINGS = {
    "auto": ({}, ["threads=auto"]),
    "auto+passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, ["threads=auto"]),
    "1 thread": ({}, ["threads=1"]),
}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--busy", type=int, default=2)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--subjects", default="[abstract_algebra,anatomy,astronomy,virology]")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        common = [f"limit={args.limit}", f"subjects={args.subjects}", "tracking.mlflow=false",
                  f"tracking.db_url=sqlite:///{where / 'bench.db'}", "tracking.resume=false"]  # fmt: skip
        _score({}, ["threads=auto"], where, common)  # warm: the model converted and cached once
        print(
            f"cores {len(os.sched_getaffinity(0))}, {args.busy} busy processes, {args.limit} × 4 subjects, 5-shot"
        )
        print(f"| setting | alone s | beside {args.busy} busy s | slowdown |\n|---|---:|---:|---:|")
        for name in args.settings:
            env, extra = SETTINGS[name]
            alone = _score(env, extra, where, common)
            spinners = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)
            ]
            try:
                busy = _score(env, extra, where, common)
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
            print(f"| {name} | {alone:.1f} | {busy:.1f} | {busy / alone:.2f}× |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
