"""The gate's decision on one comparison's counts, and every number printed beside a verdict.

The verdict on all questions (`gate.policy.decide`) is PASS when non-inferiority at δ is shown and
no drop is. Written here as a function of (b lost, c gained, n) (`paired.py`'s notation), so that
each figure beside a verdict comes from that same rule, never from an approximation of it:

- `noninferior`: Tango's score statistic T(−δ) above z₁₋α and at least the exact unconditional
  critical value (`paired.critical_value`, Hsueh, Liu & Chen 2001): the gate's non-inferiority test.
- `drop_p`: the exact one-sided McNemar p-value of a drop, P(B ≥ b) for B ~ Bin(b + c, ½)
  (`scipy.stats.binomtest(b, b + c, alternative="greater")`); a drop is shown when it is below α.
- `passes`: non-inferior and no drop shown. A policy that also fails on flagged subjects
  (`gate.fail_on_flagged_subjects`) passes less often: for it every rate below is an upper bound.
- `lower_limit`: the one-sided lower limit of Δ the verdict holds against −δ: Tango's score limit
  at the exact critical value t* of the test at δ, the Δ₀ with T(Δ₀) = t* (at z₁₋α where the
  normal quantile keeps the level, as at large n). T falls as Δ₀ rises, so non-inferiority is shown
  exactly when this limit lies above −δ (or on it, where t* > z₁₋α): a bound above −δ never stands
  beside "not shown". At few flips t* is well above z₁₋α and the limit below the plain score
  limit: with no answer changed among 298 questions the score limit is −0.90 points, this one
  −1.00 (the gate first passes two identical runs at δ = 1 point from n = 299).
- `pass_rate`: P(PASS) at a true Δ and flip share ψ over n questions, summed exactly over every
  (b, c) outcome (`paired.outcome_distribution`): the power at Δ = 0, the size at Δ = −δ, the noise
  floor's pass probability.
- `questions_needed`: the smallest n at which a pair that changed nothing (Δ = 0) with flip share
  ψ passes with probability `power`, found by bracketing from the normal approximation
  (`paired.questions_needed_approx`, Nam 1997) and halving: an n whose rate reaches `power` where
  n − 1 falls short. The exact rate is a saw-tooth in n (the outcomes are discrete), so another
  such n may lie a little lower, and an n a little above can fall short by a fraction of a point of
  power; at ψ = 0 it is the first n at which the gate passes two identical runs, which holds from
  there on. Past EXACT_UP_TO (MMLU's size) it is the approximation: only "more than the whole test
  set" matters there.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from mmlu_track.stats import paired

Bools = NDArray[np.bool_]
# Beyond MMLU's 14,042 test questions no sample can be that large: the count only says "more than
# the whole test set", and the normal approximation is within about 1 % of the exact one there
# (0.6 % at 12,453), at a fraction of its cost (seconds per search at that size).
EXACT_UP_TO = 14_042


def _z(alpha: float) -> float:
    return float(stats.norm.ppf(1 - alpha))


def drop_p(lost: ArrayLike, gained: ArrayLike) -> NDArray[np.float64]:
    """Exact one-sided McNemar p-value of a drop (lost > gained), elementwise; 1 when nothing changed."""
    b, c = (np.asarray(v, dtype=np.float64) for v in (lost, gained))
    m = b + c
    return np.asarray(np.where(m > 0, stats.binom.sf(b - 1, np.maximum(m, 1), 0.5), 1.0), dtype=np.float64)


def _drop_thresholds(m: NDArray[np.int64], alpha: float) -> NDArray[np.int64]:
    """For each number of changed answers m, the most lost b at which no drop is shown
    (P(B ≥ b) ≥ α): the inverse survival function (one vectorised call per distinct m) checked
    against the p-value itself on both sides, so that it agrees with `drop_p` exactly."""
    guess = np.asarray(stats.binom.isf(alpha, m, 0.5), dtype=np.int64)  # least k with P(B > k) ≤ α
    for _ in range(3):  # isf rounds on its own terms: step until P(B ≥ b) ≥ α > P(B ≥ b + 1)
        low = stats.binom.sf(guess - 1, m, 0.5) < alpha
        high = stats.binom.sf(guess, m, 0.5) >= alpha
        if not (low.any() or high.any()):
            return guess
        guess = guess - low + high
    raise ArithmeticError(f"no drop threshold found at α = {alpha}")  # pragma: no cover


def no_drop(lost: ArrayLike, gained: ArrayLike, alpha: float) -> Bools:
    """`drop_p(lost, gained) >= alpha`, elementwise, at the cost of one p-value per distinct
    number of changed answers (the gate's rates sum it over tens of thousands of outcomes)."""
    b, c = (np.asarray(v, dtype=np.int64) for v in (lost, gained))
    m, where = np.unique(b + c, return_inverse=True)
    return np.asarray(b <= _drop_thresholds(m, alpha)[where].reshape(b.shape))


def noninferior(lost: ArrayLike, gained: ArrayLike, n: int, margin: float, alpha: float) -> Bools:
    """Whether the gate shows Δ > −margin, elementwise over outcomes of n questions."""
    t = paired.tango_statistic(lost, gained, n, -margin)
    return np.asarray(paired.at_least_critical(t, n, margin, alpha) & (t > _z(alpha)))


def passes(lost: ArrayLike, gained: ArrayLike, n: int, margin: float, alpha: float) -> Bools:
    """PASS on all questions: non-inferiority at `margin` shown and no drop shown."""
    return np.asarray(noninferior(lost, gained, n, margin, alpha) & no_drop(lost, gained, alpha))


def limit_level(n: int, margin: float, alpha: float) -> float:
    """The z at which `lower_limit` solves T(Δ₀) = z: the exact critical value at `margin`."""
    return paired.critical_value(n, margin, alpha) if margin > 0 else _z(alpha)


def lower_limit(lost: int, gained: int, n: int, margin: float, alpha: float) -> float:
    """The one-sided lower limit of Δ that the verdict at `margin` holds against −margin: Tango's
    score limit at the exact critical value of that test (module docstring)."""
    return float(paired.tango_limit(lost, gained, n, limit_level(n, margin, alpha), "lower"))


def pass_rate(n: int, psi: float, delta: float, margin: float, alpha: float) -> float:
    """P(PASS) when the true difference is `delta` and a share `psi` of answers flips (exact)."""
    if margin <= 0:
        return 0.0
    b, c, w = paired.outcome_distribution(n, psi, delta)
    return float(np.sum(w * passes(b, c, n, margin, alpha)))


def _reaches(n: int, psi: float, margin: float, alpha: float, power: float) -> bool:
    """pass_rate(n, psi, 0, margin, alpha) ≥ power, deciding from the critical value's brackets
    (module docstring of `paired.critical_brackets`) as soon as they tell."""
    b, c, w = paired.outcome_distribution(n, psi, 0.0)
    t = paired.tango_statistic(b, c, n, -margin)
    above = t > _z(alpha)  # the drop test only where non-inferiority can be shown (the costly part)
    b, c, w, t = b[above], c[above], w[above], t[above]
    weight = w * no_drop(b, c, alpha)
    for lo, hi in paired.critical_brackets(n, margin, alpha):
        if float(np.sum(weight * (t >= hi))) >= power:  # the critical value is at most hi
            return True
        if lo == hi or float(np.sum(weight * (t > lo))) < power:  # and above lo
            return False
    return float(np.sum(weight * (t >= paired.critical_value(n, margin, alpha)))) >= power


@functools.lru_cache(maxsize=256)
def questions_needed(psi: float, margin: float, alpha: float, power: float = 0.8) -> int:
    """The smallest n at which two runs that changed nothing, with flip share `psi`, pass with
    probability `power` (module docstring)."""
    if margin <= 0:
        raise ValueError("a margin of 0 cannot be shown when nothing changed")

    def enough(n: int) -> bool:
        return _reaches(n, psi, margin, alpha, power)

    # The approximation is within a few percent of the exact count past a few hundred questions.
    guess = max(paired.questions_needed_approx(psi, margin, alpha, power), 2)
    if guess > EXACT_UP_TO:
        return guess
    low, high = int(0.93 * guess), int(1.07 * guess) + 1
    while not enough(high):
        low, high = high, 2 * high
        if high > 10**8:
            raise ValueError(f"no n up to 10^8 passes {power:.0%} of the time at δ = {margin}, ψ = {psi}")
    while low > 1 and enough(low):
        low, high = low // 2, low
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high
