"""Scoring time inside a real CPU quota (a container's or CI runner's CPU limit), per thread setting.

Makes a cgroup with a quota of `--cpus` CPUs (cgroup v2's `cpu.max` where the cpu controller is
enabled, else v1's `cpu.cfs_quota_us`; needs root, as a container runtime has), runs the same
evaluation inside it (the default model, 5-shot, `--subjects` × `--limit`, its own store, MLflow
off) with `threads=auto` and with torch's default of one thread per core the process sees
(`threads=<cores>`), and removes the cgroup. Printed per setting: what `auto` chose and why (the
run's `host.threads`), `scoring_s`, and the ratio to `auto`, all in one invocation.

    sudo python benchmarks/bench_quota.py --cpus 1
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench_contention import _run

ROOT = Path("/sys/fs/cgroup")


def _make_cgroup(cpus: float) -> Path:
    """A new cgroup limited to `cpus` CPUs; its folder (whose cgroup.procs a process joins)."""
    name = f"mmlu_track_bench_{os.getpid()}"
    period = 100_000
    control = ROOT / "cgroup.subtree_control"  # cgroup v2, with the cpu controller for children
    if control.exists() and "cpu" in control.read_text().split():
        folder = ROOT / name
        folder.mkdir()
        (folder / "cpu.max").write_text(f"{int(cpus * period)} {period}")
    else:
        folder = ROOT / "cpu" / name
        folder.mkdir()
        (folder / "cpu.cfs_period_us").write_text(str(period))
        (folder / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpus", type=float, default=1.0)
    parser.add_argument("--limit", type=int, default=15)
    parser.add_argument("--subjects", default="[anatomy,virology]")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    folder = _make_cgroup(args.cpus)

    def join() -> None:  # in the child, before it starts: into the limited cgroup
        (folder / "cgroup.procs").write_text(str(os.getpid()))

    try:
        with tempfile.TemporaryDirectory() as tmp:
            where = Path(tmp)
            common = [f"limit={args.limit}", f"subjects={args.subjects}", "tracking.mlflow=false",
                      f"tracking.db_url=sqlite:///{where / 'bench.db'}", "tracking.resume=false"]  # fmt: skip
            _run({}, ["threads=auto"], where, common)  # warm: the model converted and cached once
            print(f"cgroup {folder} quota {args.cpus:g} CPU, {cores} cores in the affinity mask, "
                  f"{args.limit} × {args.subjects}, 5-shot")  # fmt: skip
            print("| setting | threads chosen | scoring s | vs auto |\n|---|---|---:|---:|")
            auto = None
            for name, extra in (
                ("auto", ["threads=auto"]),
                (f"{cores} (torch's default)", [f"threads={cores}"]),
            ):
                doc = _run({}, extra, where, common, preexec=join)
                took = float(doc["timing"]["scoring_s"])
                auto = auto or took
                print(f"| {name} | {doc['host']['threads']} | {took:.1f} | {took / auto:.2f}× |", flush=True)
    finally:
        folder.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
