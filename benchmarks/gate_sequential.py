"""Operating characteristics of the sequential gate (`mmlu_track/stats/sequential.py`) by simulation.

For full MMLU (14,042 questions in 20 looks by default), a share of answers changed between the
baseline and the candidate (discordance) and a true Δ, it draws each look's (lost, gained) counts and
runs the gate's two betting tests. Printed per cell: the rates of pass, regression and inconclusive,
and the mean share of the questions scored before the decision (1 when none came). The guarantees:
false pass at Δ = −δ ≤ α, false regression at Δ = 0 ≤ α (± the printed Monte Carlo error).

    python benchmarks/gate_sequential.py                          # 100,000 runs per cell, δ = 1 point
    python benchmarks/gate_sequential.py --reps 20000 --looks 10 --margin 0.02
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from mmlu_track.stats.sequential import Design, simulate

DISCORDANCE = (0.02, 0.06, 0.10, 0.20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=14_042, help="questions (full MMLU)")
    ap.add_argument("--looks", type=int, default=20)
    ap.add_argument("--margin", type=float, default=0.01, help="δ (0.01 = 1 point)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--reps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    deltas = (-0.03, -args.margin, 0.0, 0.01)
    mc = math.sqrt(args.alpha * (1 - args.alpha) / args.reps)
    print(
        f"sequential gate: n = {args.n:,}, {args.looks} looks, δ = {100 * args.margin:g} pts, α = {args.alpha}, "
        f"{args.reps:,} runs per cell (Monte Carlo error at α: ±{mc:.4f})\n"
    )
    print("| discordance | true Δ (pts) | pass | regression | inconclusive | share of questions used |")
    print("|---:|---:|---:|---:|---:|---:|")
    t0 = time.time()
    for disc in DISCORDANCE:
        for delta in deltas:
            if abs(delta) > disc:
                continue  # a change of Δ needs at least |Δ| of the answers to change
            design = Design(args.n, args.looks, args.margin, args.alpha)
            c = simulate(design, discordance=disc, delta=delta, reps=args.reps, rng=rng)
            mark = " ←" if (delta == -args.margin and c.p_pass > args.alpha + 3 * mc) or (
                delta == 0 and c.p_regression > args.alpha + 3 * mc) else ""  # fmt: skip
            print(
                f"| {100 * disc:.0f} % | {100 * delta:+.0f} | {c.p_pass:.4f} | {c.p_regression:.4f} | "
                f"{c.p_inconclusive:.4f} | {c.share_used:.3f}{mark} |"
            )
    print(f"\n({time.time() - t0:.1f} s; ← marks an error rate above α + 3 Monte Carlo errors)")


if __name__ == "__main__":
    main()
