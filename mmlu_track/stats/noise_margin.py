"""The evaluation's own noise: what a difference must exceed before it is the model's.

Two runs of one model that differ only in what must not matter (the same settings again, another
batching, other few-shot examples, another order of the choices) still differ on some questions.
Per pair of runs over the same n questions: b answers lost and c gained (`paired.py`'s notation),
the **flip rate** ψ̂ = (b + c)/n with its Wilson interval, and Δ = (c − b)/n with Tango's score
interval (the gate's own). Across shot seeds, the spread of accuracy: the sample standard
deviation (ddof = 1) and the range, per subject, category and overall.

**The smallest margin the gate can use at this noise.** The gate passes a pair when it shows
non-inferiority at δ (Tango's score test and the exact unconditional test, Hsueh, Liu & Chen 2001,
both reject H₀: Δ ≤ −δ) and shows no drop (exact McNemar): `stats.decision.passes`. For two runs
that differ by noise alone (Δ = 0) with flip rate ψ over n questions, the probability that the gate
passes is

    P_pass(δ; n, ψ) = Σ_(b,c) P(b, c | n, ψ, Δ = 0) · 1[the gate passes (b, c, n) at δ],

summed exactly over every outcome (`decision.pass_rate`: b + c ~ Bin(n, ψ), b | b + c ~
Bin(b + c, ½)). The recommended margin is the smallest δ with P_pass ≥ 0.95 — a noise-only pair
then passes 19 times in 20 — found by bisection (P_pass rises with δ). Worked example: with no
flips (ψ = 0) the exact test's p-value is (1 − δ)ⁿ, the chance that nothing flips when every flip
would be a loss (ψ = δ), and the score test needs −z²/(n + z²) > −δ; so δ_min =
max(1 − α^(1/n), z²/(n + z²)): at n = 299 and α = 0.05, 1 − 0.05^(1/299) = 0.997 points, and
two identical runs first pass δ = 1 point at n = 299.

**The measured flip rate's own error.** A measurement over n questions estimates ψ; the floor rests
on the one-sided 95 % upper Wilson limit of the worst gated pair's flips (`flip_upper`), not on ψ̂:
taken too low, the floor would let two runs that differ by noise alone fail the gate more than one
time in 20 (a release blocked for nothing), which is what the floor exists to prevent. With no flip
among 114 questions the limit is 2.3 %. ψ is a per-question rate of the prompt protocol, so the
same measurement gives δ at any other n (`smallest_margin(n, flip_upper, α)`): the gate computes
it at the comparison's own n.

**The questions needed** at a chosen δ and the measured ψ: `decision.questions_needed` (a pair
that changed nothing passes 80 % of the time), the number an INCONCLUSIVE verdict prints.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mmlu_track.stats import decision, paired

PASS_PROBABILITY = 0.95  # a noise-only pair must pass this often at the recommended margin
FLIP_UPPER_LEVEL = 0.95  # the one-sided level of the flip rate's upper limit the floor rests on


def flip_upper(flips: int, n: int) -> float:
    """The one-sided upper limit of a flip rate at FLIP_UPPER_LEVEL (Wilson; module docstring)."""
    return paired.wilson(flips, n, 2 * (1 - FLIP_UPPER_LEVEL))[1] if n else 1.0


def pass_probability(n: int, psi: float, margin: float, alpha: float) -> float:
    """P(the gate passes | Δ = 0, flip rate `psi`, `n` questions, margin δ) (module docstring)."""
    return decision.pass_rate(n, psi, 0.0, margin, alpha)


@functools.lru_cache(maxsize=256)
def smallest_margin(n: int, psi: float, alpha: float, probability: float = PASS_PROBABILITY) -> float:
    """The smallest δ at which a noise-only pair passes with `probability` (to 0.05 points, above),
    by bisection on the exact pass probability, bracketed around the normal approximation's δ
    (`paired.questions_needed_approx` at that power: cheap, and close)."""

    def passes(delta: float) -> bool:
        return pass_probability(n, psi, delta, alpha) >= probability

    lo, hi = 1e-4, 1.0
    while hi - lo > 1e-4:  # the approximation's δ: questions_needed(δ) <= n
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if paired.questions_needed_approx(psi, mid, alpha, probability) <= n else (mid, hi)
    guess = hi
    lo, hi = 0.6 * guess, min(1.6 * guess, 1.0)
    while not passes(hi):
        if hi >= 1.0:
            return 1.0
        lo, hi = hi, min(2 * hi, 1.0)
    while lo > 0 and passes(lo):
        lo, hi = lo / 2, lo
    while hi - lo > 5e-4:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class PairNoise:
    """A reference run against one that differs only in what must not matter."""

    name: str  # what differs: "repeat", "batching", "shot seed 2", ...
    n: int
    lost: int
    gained: int
    flip_low: float  # the flip rate's Wilson interval
    flip_high: float
    delta_low: float  # Δ's two-sided score interval (Tango)
    delta_high: float

    @property
    def flip_rate(self) -> float:
        """The share of questions whose outcome differs between the two runs (0.0 for no questions)."""
        return (self.lost + self.gained) / self.n if self.n else 0.0

    @property
    def delta(self) -> float:
        """The other run's accuracy minus the reference's, as a fraction (0.0 for no questions)."""
        return (self.gained - self.lost) / self.n if self.n else 0.0


def pair_noise(name: str, reference: Sequence[bool], other: Sequence[bool], alpha: float = 0.05) -> PairNoise:
    """`name`'s flips against the reference, question by question (aligned outcomes); over no
    questions the widest intervals, flip rate in [0, 1] and Δ in [-1, 1]."""
    x, y = np.asarray(reference, dtype=bool), np.asarray(other, dtype=bool)
    if x.shape != y.shape:
        raise ValueError(f"{name}: {len(y)} questions against the reference's {len(x)}")
    n, lost, gained = len(x), int(np.sum(x & ~y)), int(np.sum(~x & y))
    if n == 0:  # no question tells anything: every rate and difference is possible (no 0/0)
        return PairNoise(name, 0, 0, 0, 0.0, 1.0, -1.0, 1.0)
    f_low, f_high = paired.wilson(lost + gained, n, alpha)
    d_low, d_high = paired.tango_interval(lost, gained, n, alpha)
    return PairNoise(name, n, lost, gained, f_low, f_high, float(d_low), float(d_high))


@dataclass(frozen=True)
class Spread:
    """Accuracy across runs that differ only in their shot seed: its SD (ddof = 1) and range."""

    accuracies: tuple[float, ...]

    @property
    def sd(self) -> float:
        """The accuracies' sample standard deviation (ddof = 1); NaN below two runs."""
        return float(np.std(self.accuracies, ddof=1)) if len(self.accuracies) > 1 else math.nan

    @property
    def range(self) -> float:
        """The highest accuracy minus the lowest (0.0 for one run; `ValueError` for none)."""
        return max(self.accuracies) - min(self.accuracies)


@dataclass(frozen=True)
class Recommendation:
    """What a noise measurement implies for the gate (`recommend`): at n questions (the fewest of any
    pair), the worst flip rate and its upper limit, the smallest usable margin, and the user's own
    margin with the questions it needs; rates and margins are fractions (0.01 is one point)."""

    n: int
    flip_rate: float  # the largest measured among the pairs: the gate must live with the worst
    flip_upper: float  # its one-sided 95 % upper limit, what the floor rests on
    margin: float  # the smallest δ at which a noise-only pair passes 95 % of the time, at n
    chosen_margin: float  # the δ the user's gate uses
    needed_at_chosen: int | None  # questions for 80 % power at the chosen δ (None: δ = 0)
    alpha: float

    def paragraph(self, spread: Spread | None) -> str:
        """One paragraph a release manager can paste."""
        shots = (
            f" Accuracy moved {100 * spread.range:.1f} points across {len(spread.accuracies)} shot seeds "
            f"(SD {100 * spread.sd:.2f})."
            if spread is not None and len(spread.accuracies) > 1
            else ""
        )
        need = f"{self.needed_at_chosen:,}" if self.needed_at_chosen is not None else "no number of"
        verdict = (
            f"is below it: at n = {self.n:,} two runs differing only by noise would fail it more than "
            f"{100 * (1 - PASS_PROBABILITY):.0f} % of the time"
            if self.chosen_margin < self.margin
            else "clears it"
        )
        flips, n, floor = 100 * self.flip_rate, f"{self.n:,}", 100 * self.margin
        upper = 100 * self.flip_upper
        return (
            f"This evaluation's own noise: up to {flips:.1f} % of the answers flip between runs that differ "
            f"only in what must not matter, at n = {n} (at most {upper:.1f} % at 95 % confidence).{shots} "
            f"At that noise the smallest margin the gate can use at n = {n} is δ = {floor:.2f} points (a "
            f"noise-only pair passes {100 * PASS_PROBABILITY:.0f} % of the time at α = {self.alpha}); the "
            f"configured gate.margin = {100 * self.chosen_margin:.2f} points {verdict}, and a noise-only "
            f"pair passes it 80 % of the time from {need} questions. A gate over more questions of this "
            "protocol reads its own, smaller δ from this measurement."
        )


def recommend(pairs: Sequence[PairNoise], chosen_margin: float, alpha: float) -> Recommendation:
    """The margin and sample size this noise allows (module docstring)."""
    if not pairs:
        raise ValueError("no pair of runs to measure noise on")
    n = min(p.n for p in pairs)
    psi = max(p.flip_rate for p in pairs)
    upper = max(flip_upper(p.lost + p.gained, p.n) for p in pairs)
    needed = decision.questions_needed(upper, chosen_margin, alpha) if chosen_margin > 0 else None
    return Recommendation(n, psi, upper, smallest_margin(n, upper, alpha), chosen_margin, needed, alpha)
