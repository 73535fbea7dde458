"""Operating characteristics of the release gate's statistics at every sample size.

For n questions, a share psi of answers flipping between baseline and candidate, and a true
difference Δ, the gate's non-inferiority decision and intervals depend on (lost, gained) only.
`--method exact` (default) sums over every (lost, gained) outcome with its probability, which is
what a simulation estimates, without Monte Carlo error; `--method montecarlo --sims N` draws N
outcomes per cell instead (its error is printed).

Printed per margin δ:
- size: the rate at which non-inferiority is shown when Δ = −δ exactly (must be ≤ α);
- coverage: of the two-sided 95% score interval at Δ = −δ and at Δ = 0 (goal ≥ 94%);
- power: the rate at which the gate PASSes when nothing changed (Δ = 0): non-inferiority shown and
  no drop shown (`stats.decision.passes`, the rule decide() applies);
- n80: the questions at which that rate reaches 80 % (the gate's own "questions needed").

    python benchmarks/gate_simulation.py                      # δ = 1, 2, 5 points, exact
    python benchmarks/gate_simulation.py --margins 1 --method montecarlo --sims 20000
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from mmlu_track.stats import decision, paired

NS = (20, 100, 570, 1140, 14042)
FLIPS = (0.0, 0.02, 0.06, 0.10, 0.20)


def _outcomes(
    n: int, psi: float, delta: float, *, method: str, sims: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if method == "exact":
        return paired.outcome_distribution(n, psi, delta)
    q_b, q_c = (psi - delta) / 2, (psi + delta) / 2
    draws = rng.multinomial(n, [q_b, q_c, 1 - q_b - q_c], size=sims)
    return draws[:, 0].astype(float), draws[:, 1].astype(float), np.full(sims, 1.0 / sims)


def characteristics(
    n: int, margin: float, alpha: float, *, method: str = "exact", sims: int = 0, seed: int = 0
) -> dict[str, dict[float, float]]:
    """Per flip share: size at Δ = −δ, coverage at Δ = −δ and 0, power at Δ = 0 (NaN: impossible)."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[float, float]] = {"size": {}, "cover_at_margin": {}, "cover_at_0": {}, "power": {}}
    # Size peaks where every flip is a loss (psi = δ): include that boundary.
    for psi in sorted({*FLIPS, margin}):
        for delta, keys in ((-margin, ("size", "cover_at_margin")), (0.0, ("power", "cover_at_0"))):
            if psi < abs(delta):
                continue
            b, c, w = _outcomes(n, psi, delta, method=method, sims=sims, rng=rng)
            # Size: the non-inferiority test alone (a PASS also needs no drop: rarer still). Power:
            # the gate's PASS (`decision.passes`: non-inferiority shown and no McNemar drop).
            rule = decision.noninferior if delta < 0 else decision.passes
            low, high = paired.tango_interval(b, c, n, 0.05)
            out[keys[0]][psi] = float(np.sum(w * rule(b, c, n, margin, alpha)))
            out[keys[1]][psi] = float(np.sum(w * ((low <= delta) & (delta <= high))))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--margins", type=float, nargs="+", default=[1.0, 2.0, 5.0], help="δ in points")
    parser.add_argument("--ns", type=int, nargs="+", default=list(NS))
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--method", choices=["exact", "montecarlo"], default="exact")
    parser.add_argument("--sims", type=int, default=20000)
    args = parser.parse_args(argv)
    alpha = args.alpha
    # Monte Carlo error allowance: 3 standard errors of a rate at alpha (0 for the exact method).
    slack = 0.0 if args.method == "exact" else 3 * math.sqrt(alpha * (1 - alpha) / args.sims)
    ok = True
    start = time.perf_counter()
    for margin_pts in args.margins:
        margin = margin_pts / 100
        print(f"\n### δ = {margin_pts:g} points, α = {alpha} ({args.method})\n")
        flips = sorted({*FLIPS, margin})
        head = " | ".join(f"{100 * f:g}%" for f in flips)
        rows = {k: [] for k in ("size", "cover", "power")}
        for n in args.ns:
            ch = characteristics(n, margin, alpha, method=args.method, sims=args.sims)
            size = max(ch["size"].values())
            cover = min(*ch["cover_at_margin"].values(), *ch["cover_at_0"].values())
            ok &= size <= alpha + slack and cover >= 0.94 - slack

            def cells(table: dict[float, float], fmt: str, flips: list[float] = flips) -> str:
                return " | ".join(format(table[f], fmt) if f in table else "–" for f in flips)

            rows["size"].append(f"| {n:,} | {cells(ch['size'], '.4f')} | **{size:.4f}** |")
            both = {f: min(ch["cover_at_margin"].get(f, 1.0), ch["cover_at_0"].get(f, 1.0)) for f in flips}
            rows["cover"].append(f"| {n:,} | {cells(both, '.3f')} | **{cover:.3f}** |")
            rows["power"].append(f"| {n:,} | {cells(ch['power'], '.2f')} |")
        print(f"Size: P(non-inferiority shown | Δ = −δ), by share of flipped answers (max ≤ {alpha}):\n")
        print(f"| n | {head} | max |\n|---:|{'---:|' * len(flips)}---:|")
        print("\n".join(rows["size"]))
        print("\nCoverage of the 95% score interval (min over Δ = −δ and Δ = 0; goal ≥ 0.94):\n")
        print(f"| n | {head} | min |\n|---:|{'---:|' * len(flips)}---:|")
        print("\n".join(rows["cover"]))
        print("\nPower: P(PASS | Δ = 0): non-inferiority shown and no drop shown:\n")
        print(f"| n | {head} |\n|---:|{'---:|' * len(flips)}")
        print("\n".join(rows["power"]))
        needed = " | ".join(f"{decision.questions_needed(f, margin, alpha):,}" for f in flips)
        print(f"| n for 80% | {needed} |")
    print(f"\n{'OK' if ok else 'FAIL'}: size ≤ α{' + 3 MC s.e.' if slack else ''} and coverage ≥ 0.94 "
          f"in every cell ({time.perf_counter() - start:.0f} s)")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
