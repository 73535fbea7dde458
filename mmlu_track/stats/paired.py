"""Score statistics for the difference of two paired proportions (pure functions, no I/O).

Two runs answer the same n questions. Per question the baseline is right (x = 1) or wrong, and so
is the candidate (y). Of the n pairs, b were lost (x = 1, y = 0) and c gained (x = 0, y = 1);
their probabilities are q_b and q_c, and Δ = q_c − q_b is the candidate's accuracy minus the
baseline's. Every function below depends on the data through (b, c, n) only, and takes numpy
arrays of them (the gate's simulations evaluate thousands at once).

**Tango's score statistic** (Tango, *Stat Med* 17:891–908, 1998, eqs. 3–5). For a hypothesised
difference Δ₀,

    T(Δ₀) = (c − b − nΔ₀) / √( n · (2 q̃_b + Δ₀(1 − Δ₀)) ),

where q̃_b is the maximum-likelihood estimate of q_b under the constraint q_c − q_b = Δ₀, the root
in [0, 1] of 2n q² + (−b − c + (2n + b − c)Δ₀) q − bΔ₀(1 − Δ₀) = 0. At Δ₀ = 0 it is McNemar's
(c − b)/√(b + c). T decreases in Δ₀, so:
- the **score interval** at level 1 − a is {Δ₀ : |T(Δ₀)| < z₁₋ₐ/₂}, found by bisection; it always
  lies inside [−1, 1], and with no discordant pair at all it is ±z²/(n + z²) — never a point;
- the **non-inferiority test** of H₀: Δ ≤ −δ against H₁: Δ > −δ rejects when T(−δ) > z₁₋α, with
  p = 1 − Φ(T(−δ)); it rejects exactly when the one-sided (1 − α) score limit exceeds −δ. The gate
  also asks the exact test below, which at few flips rejects later: the limit the gate prints is
  that combined rule's own (`decision.lower_limit`), not this one.

**An exact critical value** (Hsueh, Liu & Chen, *Biometrics* 57:478–483, 2001: the unconditional
exact test ordered by the score statistic). T is asymptotically normal, and at small n or few
flips its one-sided size can exceed α (about 5.5 % at n = 100). The exact size of "reject when
T(−δ) ≥ t" at nuisance ψ = q_b + q_c (the share of flipped answers) is
P_ψ(T ≥ t) = Σ_m Bin(m; n, ψ) · P(C ≥ c*(m) | m), C | m ~ Bin(m, (ψ − δ)/(2ψ)),
where c*(m) is the fewest gained among m flips with T ≥ t (T rises with c at fixed m). The exact
p-value is its supremum over ψ ∈ [δ, 1] (taken on a grid), and the gate shows non-inferiority
only when both the score test and this exact test reject: its level holds at every n.

**Macro averages** (the unweighted mean over subjects, Σ w_k θ_k with w_k = 1/K) use Kish's
effective sample size (Kish, *Survey Sampling*, 1965, §8.2; as Korn & Graubard, *Survey
Methodology* 24:193–201, 1998, do for proportions from weighted data): n_eff = 1 / Σ w_k²/n_k,
the n of a simple sample with the same variance when the subjects share one rate. The weighted
rates times n_eff are effective counts, and the same score interval (Tango for a paired Δ, Wilson
for an accuracy) is computed from them. With equal subject sizes this is exactly the micro
interval; it stays inside the parameter's range and never collapses (MOVER, which combines the
subjects' own intervals, loses a side whenever a small subject sits at 0/n or n/n).

**Questions needed, approximately** (where the exact search of `decision.py` starts), to show
non-inferiority at margin δ with power 1 − β when nothing changed (Δ = 0) and a share ψ of answers
flips (Nam, *Biometrics* 53:1422–1430, 1997; Liu et al., *Stat Med* 21:231–245, 2002):
n = (z₁₋α σ₀ + z₁₋β σ₁)² / δ², with σ₁² = ψ and σ₀² = 2q̃_b + Δ₀(1 − Δ₀) at Δ₀ = −δ,
q̃_b the constrained estimate for cell shares q_b = q_c = ψ/2.

**Single accuracies** get Wilson score intervals (statsmodels' `proportion_confint`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

Floats = NDArray[np.float64]
_BISECTIONS = 60  # halves [-1, 1] below 1e-17: exact to float precision


def _constrained_qb(b: Floats, c: Floats, n: Floats, d0: Floats) -> Floats:
    """q̃_b: the MLE of P(lost) given P(gained) − P(lost) = d0 (Tango 1998, eq. 5). Float arrays of
    one shape; the caller silences numpy's 0/0 warnings (only n = 0 divides by zero: q̃_b = 0)."""
    a2 = 2.0 * n
    bq = -b - c + (2.0 * n + b - c) * d0
    cq = -b * d0 * (1.0 - d0)
    root = np.sqrt(np.maximum(bq * bq - 4.0 * a2 * cq, 0.0))
    # The same root written two ways, each free of cancellation on its side of B = 0.
    q = np.where(bq <= 0, (root - bq) / (2.0 * a2), (-2.0 * cq) / (bq + root))
    return np.where(np.isfinite(q), q, 0.0)


def _statistic(b: Floats, c: Floats, n: Floats, d0: Floats) -> Floats:
    # T of float arrays of one shape, warnings silenced by the caller (the bisections call this
    # thousands of times: no conversions, no error-state switches inside).
    q = _constrained_qb(b, c, n, d0)
    num = c - b - n * d0
    var = np.maximum(n * (2.0 * q + d0 * (1.0 - d0)), 0.0)
    t = np.where(var == 0, np.copysign(np.inf, num), num / np.sqrt(var))
    return np.where(num == 0, 0.0, t)


def _floats(*values: ArrayLike) -> list[Floats]:
    return [np.asarray(v, dtype=np.float64) for v in np.broadcast_arrays(*(np.asarray(v) for v in values))]


def tango_statistic(b: ArrayLike, c: ArrayLike, n: ArrayLike, delta0: ArrayLike) -> Floats:
    """T(Δ₀) of the module docstring, elementwise (±inf where the variance is 0, 0 where 0/0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _statistic(*_floats(b, c, n, delta0))


def _bisect(counts: tuple[Floats, Floats, Floats], lo: Floats, hi: Floats, target: Floats) -> Floats:
    """The Δ₀ in [lo, hi] with T(Δ₀) = target for counts (b, c, n), elementwise."""
    b, c, n = counts
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(_BISECTIONS):
            mid = 0.5 * (lo + hi)
            # T decreases in Δ₀: above the target the limit lies to the right of mid.
            right = _statistic(b, c, n, mid) > target
            lo = np.where(right, mid, lo)
            hi = np.where(right, hi, mid)
    return 0.5 * (lo + hi)


def score_limits(b: ArrayLike, c: ArrayLike, n: ArrayLike, z: ArrayLike, lower: ArrayLike) -> Floats:
    """Score limits elementwise: the lower one (T(L) = z) where `lower`, else the upper one
    (T(U) = −z). All are solved in one bisection, each element exactly as it would be alone: a
    comparison asks for some 130 (two per group, the macro pair, the verdict's one-sided limit)."""
    b_, c_, n_, z_, low = _floats(b, c, n, z, lower)
    down = low != 0
    est = (c_ - b_) / n_
    found = _bisect(
        (b_, c_, n_), np.where(down, -1.0, est), np.where(down, est, 1.0), np.where(down, z_, -z_)
    )
    # All lost (or all gained): the observed Δ is the boundary itself.
    return np.where(down, np.where(b_ == n_, -1.0, found), np.where(c_ == n_, 1.0, found))


def tango_limit(b: ArrayLike, c: ArrayLike, n: ArrayLike, z: float, side: str) -> Floats:
    """The lower (T(L) = z) or upper (T(U) = −z) score limit, elementwise, by bisection."""
    if side not in ("lower", "upper"):
        raise ValueError(f"side must be lower or upper, not {side!r}")
    return score_limits(b, c, n, z, side == "lower")


def tango_interval(b: ArrayLike, c: ArrayLike, n: ArrayLike, alpha: float) -> tuple[Floats, Floats]:
    """Two-sided (1 − alpha) score interval for Δ."""
    z = float(stats.norm.ppf(1 - alpha / 2))
    b_, c_, n_ = _floats(b, c, n)
    sides = np.array([True, False]).reshape((2,) + (1,) * b_.ndim)  # lower, upper
    both = score_limits(np.stack([b_, b_]), np.stack([c_, c_]), np.stack([n_, n_]), z, sides)
    return both[0, ...], both[1, ...]  # 0-d arrays for scalars, as numpy gives elementwise


def _psi_grid(margin: float, points: int = 160) -> Floats:
    # Dense near ψ = |δ| (the fewest flips Δ = −δ allows), where the statistic is most skewed and
    # the size peaks.
    u = np.linspace(0.0, 1.0, points)
    low = max(abs(margin), 1e-6)
    return np.asarray(low + (1.0 - low) * u**2, dtype=np.float64)


def _fewest_gained(n: int, margin: float, t: float) -> NDArray[np.int64]:
    """c*(m) for m = 0..n: the fewest gained among m flips with T(−margin) ≥ t (m + 1 if none)."""
    m = np.arange(n + 1)
    lo, hi = np.zeros(n + 1, dtype=np.int64), m + 1
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        c = np.minimum(mid, m)
        ok = (mid <= m) & (tango_statistic(m - c, c, n, -margin) >= t)
        active = lo < hi
        hi = np.where(active & ok, mid, hi)
        lo = np.where(active & ~ok, mid + 1, lo)
    return lo


@dataclass(frozen=True)
class _NullMass:
    """Where Δ = −margin puts its mass, per ψ of a grid: each (ψ, m) with Bin(m; n, ψ) above 1e-20
    (what is left out sums to less than (n + 1)·1e-20 per ψ) and the share of those m flips gained,
    (ψ − δ)/2ψ. What `exact_size` sums does not depend on the threshold t: computed once per
    (n, margin, grid), flattened."""

    row: NDArray[np.int64]  # which ψ of the grid
    m: NDArray[np.int64]  # flips
    mass: Floats  # Bin(m; n, ψ)
    share_gained: Floats
    rows: int
    # The last thresholds asked for and their tails: a critical-value search asks for t close to
    # the last, where c*(m) moves for few m, so only those tails are computed again (one search
    # at a time: the gate's statistics run in one thread).
    asked: NDArray[np.int64]
    tails: Floats

    @classmethod
    def of(cls, n: int, margin: float, grid: Floats) -> _NullMass:
        sd = np.sqrt(n * grid * (1 - grid))
        lo = np.clip(np.floor(n * grid - 12 * sd) - 2, 0, n).astype(np.int64)
        hi = np.clip(np.ceil(n * grid + 12 * sd) + 2, 0, n).astype(np.int64)
        m = lo[:, None] + np.arange(int(np.max(hi - lo)) + 1)[None, :]
        inside = m <= hi[:, None]
        m = np.minimum(m, n)
        mass = np.where(inside, stats.binom.pmf(m, n, grid[:, None]), 0.0)
        share = np.broadcast_to(np.clip((grid - margin) / (2 * grid), 0.0, 1.0)[:, None], m.shape)
        row = np.broadcast_to(np.arange(len(grid))[:, None], m.shape)
        keep = mass > 1e-20
        unasked = np.full(int(np.count_nonzero(keep)), -2, dtype=np.int64)  # need(m) − 1 ≥ −1
        return cls(row[keep], m[keep], mass[keep], share[keep], len(grid), unasked, np.zeros(unasked.shape))

    def size(self, need: NDArray[np.int64]) -> float:
        """The sup over the grid of P(C ≥ need(m)): the size of a test rejecting from need(m) gained."""
        k = need[self.m] - 1
        new = np.flatnonzero(k != self.asked)
        self.tails[new] = stats.binom.sf(k[new], self.m[new], self.share_gained[new])
        self.asked[new] = k[new]
        per_psi = np.bincount(self.row, weights=self.mass * self.tails, minlength=self.rows)
        return min(float(np.max(per_psi)), 1.0)


@functools.lru_cache(maxsize=16)
def _null_mass(n: int, margin: float) -> _NullMass:
    return _NullMass.of(n, margin, _psi_grid(margin))


def exact_size(n: int, margin: float, t: float, psi: ArrayLike | None = None) -> float:
    """The sup over ψ of P(T(−margin) ≥ t) when Δ = −margin (the exact p-value at T = t)."""
    if psi is None:
        null = _null_mass(n, margin)
    else:
        null = _NullMass.of(n, margin, np.atleast_1d(np.asarray(psi, dtype=np.float64)))
    return null.size(_fewest_gained(n, margin, t))


class _CriticalSearch:
    """The search for one (n, margin, alpha)'s critical value, kept step by step: each step a
    narrower bracket (lo, hi] that holds it (lo = hi = z₁₋α where the normal quantile already keeps
    the level). A caller that only needs to know on which side of it some T lies stops at the first
    bracket that tells; a later caller resumes where the last stopped."""

    def __init__(self, n: int, margin: float, alpha: float) -> None:
        self._steps: list[tuple[float, float]] = []
        self._search = self._brackets(n, margin, alpha)

    @staticmethod
    def _brackets(n: int, margin: float, alpha: float) -> Iterator[tuple[float, float]]:
        z = float(stats.norm.ppf(1 - alpha))
        if exact_size(n, margin, z) <= alpha:
            yield z, z
            return
        # The excess over z shrinks with n (about 0.002 at 14,042 questions): bracket it from below.
        lo, step = z, 0.01
        hi = z + step
        while exact_size(n, margin, hi) > alpha:
            lo, step = hi, 4 * step
            hi = lo + step
        yield lo, hi
        while hi - lo > 1e-7:  # the size is a step function of t: this pins its step
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if exact_size(n, margin, mid) > alpha else (lo, mid)
            yield lo, hi

    def brackets(self) -> Iterator[tuple[float, float]]:
        i = 0
        while True:
            if i == len(self._steps):
                step = next(self._search, None)
                if step is None:
                    return
                self._steps.append(step)
            yield self._steps[i]
            i += 1


@functools.lru_cache(maxsize=64)
def _critical_search(n: int, margin: float, alpha: float) -> _CriticalSearch:
    # Cached: a gate's simulations ask for the same n again and again.
    return _CriticalSearch(n, margin, alpha)


def critical_brackets(n: int, margin: float, alpha: float) -> Iterator[tuple[float, float]]:
    """Ever narrower brackets (lo, hi] of `critical_value(n, margin, alpha)`, the last one its own."""
    return _critical_search(n, margin, alpha).brackets()


def critical_value(n: int, margin: float, alpha: float) -> float:
    """The smallest t with exact size ≤ alpha (to 1e-7), never below the normal quantile z₁₋α."""
    *_, (_, hi) = critical_brackets(n, margin, alpha)
    return hi


def at_least_critical(t: ArrayLike, n: int, margin: float, alpha: float) -> NDArray[np.bool_]:
    """Whether t ≥ critical_value(n, margin, alpha), elementwise, searching only as far as the t need."""
    t_ = np.asarray(t, dtype=np.float64)
    for lo, hi in critical_brackets(n, margin, alpha):
        if lo == hi or not np.any((t_ > lo) & (t_ < hi)):
            return np.asarray(t_ >= hi)
    return np.asarray(t_ >= critical_value(n, margin, alpha))


def effective_counts(
    lost: ArrayLike, gained: ArrayLike, n: ArrayLike, weights: ArrayLike
) -> tuple[float, float, float]:
    """(lost, gained, n) of a simple sample equivalent to the weighted mean of strata (Kish)."""
    b, c, m, w = (np.asarray(v, dtype=np.float64) for v in (lost, gained, n, weights))
    w = w / w.sum()
    n_eff = 1.0 / float(np.sum(w**2 / m))
    flips, delta = float(np.sum(w * (b + c) / m)), float(np.sum(w * (c - b) / m))
    return n_eff * (flips - delta) / 2, n_eff * (flips + delta) / 2, n_eff


def macro_delta_interval(
    lost: ArrayLike, gained: ArrayLike, n: ArrayLike, alpha: float
) -> tuple[float, float]:
    """Score interval of the unweighted mean over strata of Δ_k (module docstring)."""
    b, c, m = effective_counts(lost, gained, n, np.ones(np.size(n)))
    low, high = tango_interval(b, c, m, alpha)
    return float(low), float(high)


def macro_accuracy_interval(correct: ArrayLike, n: ArrayLike, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson interval of the unweighted mean over strata of accuracies (module docstring)."""
    k, m = np.asarray(correct, dtype=np.float64), np.asarray(n, dtype=np.float64)
    n_eff = 1.0 / float(np.sum((1.0 / len(m)) ** 2 / m))
    return wilson(float(np.mean(k / m)) * n_eff, n_eff, alpha)


def questions_needed_approx(discordance: float, margin: float, alpha: float, power: float = 0.8) -> int:
    """The normal approximation to the questions Tango's test needs to show Δ > −margin with `power`
    when Δ = 0 (module docstring): where `decision.questions_needed`, the gate's own count, starts."""
    if margin <= 0:
        raise ValueError("a margin of 0 cannot be shown when nothing changed")
    half = np.array([discordance / 2])
    with np.errstate(divide="ignore", invalid="ignore"):
        q = float(_constrained_qb(half, half, np.array([1.0]), np.array([-margin]))[0])
    sigma0 = math.sqrt(max(2 * q - margin * (1 + margin), 0.0))
    sigma1 = math.sqrt(discordance)
    z_a, z_b = float(stats.norm.ppf(1 - alpha)), float(stats.norm.ppf(power))
    return math.ceil(((z_a * sigma0 + z_b * sigma1) / margin) ** 2)


def wilson(correct: float, n: float, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval of a single accuracy (statsmodels; effective counts may be fractional)."""
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return 0.0, 1.0
    low, high = proportion_confint(correct, n, alpha=alpha, method="wilson")
    return float(low), float(high)


def outcome_distribution(
    n: int, psi: float, delta: float, tail: float = 1e-15
) -> tuple[Floats, Floats, Floats]:
    """Every (b, c) outcome of n paired questions with P(lost) + P(gained) = psi and
    P(gained) − P(lost) = delta, with its probability (outcomes rarer than `tail` left out).
    Operating characteristics computed over it are what a simulation estimates, without its error."""
    q_b, q_c = (psi - delta) / 2, (psi + delta) / 2
    if min(q_b, q_c) < -1e-12 or psi > 1:
        raise ValueError(f"no such paired design: flips {psi}, Δ {delta}")
    if psi <= 0:
        return np.zeros(1), np.zeros(1), np.ones(1)
    p_m = stats.binom.pmf(np.arange(n + 1), n, psi)
    m = np.flatnonzero(p_m > tail)
    share_lost = min(max(q_b / psi, 0.0), 1.0)
    # Every b of each m within 12 standard deviations (beyond, the binomial mass is below 1e-30).
    sd = np.sqrt(m * share_lost * (1 - share_lost))
    first = np.clip(np.floor(m * share_lost - 12 * sd) - 2, 0, None).astype(np.int64)
    last = np.minimum(np.ceil(m * share_lost + 12 * sd) + 2, m).astype(np.int64)
    b = first[:, None] + np.arange(int(np.max(last - first)) + 1)[None, :]
    inside = b <= last[:, None]
    b = np.minimum(b, last[:, None])
    w = np.where(inside, stats.binom.pmf(b, m[:, None], share_lost) * p_m[m][:, None], 0.0)
    keep = w > tail
    lost = b[keep]
    return (
        lost.astype(np.float64),
        (np.broadcast_to(m[:, None], b.shape)[keep] - lost).astype(np.float64),
        w[keep],
    )
