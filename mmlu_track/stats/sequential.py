"""The sequential gate's statistics: anytime-valid tests of the paired difference, look by look.

Per question, d = y - x in {-1, 0, 1} (candidate minus baseline correctness); Δ = E[d], the same
quantity and the same model (questions exchangeable) as the fixed-sample gate in `stats.py`.
Questions arrive in looks; look j brings n_j questions, b_j lost and c_j gained.

Testing by betting (Waudby-Smith & Ramdas, "Estimating means of bounded random variables by
betting", *JRSS B* 86(1):1-27, 2024, arXiv:2010.09686; Shafer, *JRSS A* 184:407-431, 2021). To test
H0: Δ <= m, bet on X = d - m in [-1 - m, 1 - m] with a predictable fraction λ >= 0:

    W_t(m) = prod_{i <= t} (1 + λ_i (d_i - m))

is a nonnegative supermartingale under H0 (E[1 + λ_i X_i | past] = 1 + λ_i (Δ - m) <= 1), so by
Ville's inequality P(sup_t W_t(m) >= 1/α) <= α: H0 may be rejected at the first look where the
wealth reaches 1/α, however many looks are taken, and the looks may stop the evaluation. The test
of H0: Δ >= m bets on m - d the same way. Two such tests make the gate:

- pass (non-inferiority at δ shown): H0: Δ <= -δ rejected; its false-pass rate at Δ = -δ is <= α;
- regression (a drop shown): H0: Δ >= 0 rejected; its false-regression rate at Δ = 0 is <= α;
- both at one look: regression (as the fixed gate: no pass while a drop is shown); neither by the
  last look: inconclusive.

The bet: any predictable λ >= 0 keeps the guarantee; the choice only sets how soon a true effect
is found. Each side makes the approximate Kelly bet (the paper's GRAPA, λ = μ / E[X²]) for a truth
one margin beyond its null, μ = δ, rather than for the running mean: λ = δ / E[(d - m)²], with the
second moment estimated from the earlier looks (a prior of SECOND_MOMENT_PRIOR worth one question
before any), and truncated at LAMBDA_CAP / (largest loss of X) as in the paper's hedged capital
process. Betting on the running mean instead wastes the early looks (it bets nothing while the
estimate is below the null): at 6 % discordance, Δ = 0, it needed 45 % of the questions in a
400-run trial simulation, this bet 32 % (`benchmarks/gate_sequential.py`). λ is constant within a
look: since the product is then a function of the look's counts, W only needs (b_j, c_j, n_j):

    log W_k(m) = sum_{j <= k} [ b_j log(1 - λ_j (1 + m)) + (n_j - b_j - c_j) log(1 - λ_j m)
                                + c_j log(1 + λ_j (1 - m)) ]

and (a remark of ours) when each look holds the subjects in proportion, AM-GM keeps E[W] <= 1 at
the looks even if subjects differ in Δ: prod_i (1 + λ Δ_i) <= (1 + λ mean_i Δ_i)^n.

The interval at a look is the confidence sequence {m : no earlier or current look rejected m on
either side} (Howard, Ramdas, McAuliffe & Sekhon, *Ann. Statist.* 49(2):1055-1080, 2021): each
bound holds at level 1 - α simultaneously over all looks, so [lower, upper] covers Δ with
probability >= 1 - 2α at any stopping look, on a grid of GRID_STEP.

`simulate` draws looks' counts from a multinomial (i.i.d. questions) for the benchmark and tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

SECOND_MOMENT_PRIOR = 0.1  # E[(d - m)^2] before any look: 10 % of answers changed
LAMBDA_CAP = 0.5
GRID_STEP = 0.0005  # the interval's resolution: 0.05 points

Decision = Literal["pass", "regression", "continue"]


@dataclass(frozen=True)
class LookCounts:
    """One look's questions: n scored, b lost (right in the baseline, wrong in the candidate),
    c gained."""

    n: int
    lost: int
    gained: int


@dataclass(frozen=True)
class SequentialResult:
    """The sequential gate's state at its deciding look (`decide_looks`): the decision, the questions
    used up to that look, the anytime-valid bounds of Δ and the log-wealth of both tests there."""

    decision: Decision
    look: int  # 1-based look of the decision (the last look given when it is "continue")
    n: int  # questions used up to that look
    lost: int
    gained: int
    lower: float  # anytime-valid one-sided (1 - α) bounds of Δ at that look (the grid's step)
    upper: float
    log_wealth_pass: float  # log W of the non-inferiority test (rejects at log(1/α))
    log_wealth_regression: float

    @property
    def delta(self) -> float:
        """The observed Δ up to the look, (gained - lost) / n, as a fraction (0.0 for no questions)."""
        return (self.gained - self.lost) / self.n if self.n else 0.0


def _log_wealth(counts: np.ndarray, nulls: np.ndarray, margin: float, side: int) -> np.ndarray:
    """The log W after each look for each null: side +1 tests Δ <= m, -1 tests Δ >= m.

    counts: (R, K, 3) n, lost, gained of K looks in R sequences; nulls: (G,). Returns (R, G, K)."""
    n, b, c = (counts[:, None, :, i].astype(float) for i in range(3))
    m = nulls[None, :, None]
    # X = side * (d - m): its values for a lost, an unchanged and a gained question.
    x_lost, x_same, x_gain = side * (-1 - m), side * (-m), side * (1 - m)
    sq = b * x_lost**2 + (n - b - c) * x_same**2 + c * x_gain**2
    # E[X^2] from the earlier looks only (λ is predictable), with the prior worth one question.
    seen = np.cumsum(n, axis=-1) - n
    sq_seen = np.cumsum(sq, axis=-1) - sq
    second = (SECOND_MOMENT_PRIOR + sq_seen) / (1.0 + seen)
    worst = -np.minimum(np.minimum(x_lost, x_same), x_gain)
    lam = np.minimum(margin / second, LAMBDA_CAP / worst)
    per_look = b * np.log1p(lam * x_lost) + (n - b - c) * np.log1p(lam * x_same) + c * np.log1p(lam * x_gain)
    return np.asarray(np.cumsum(per_look, axis=-1))


def _first_rejections(counts: np.ndarray, margin: float, alpha: float) -> tuple[np.ndarray, ...]:
    """Per sequence: log W of both tests after each look, and the first look where either rejects
    (K when none does)."""
    threshold = np.log(1 / alpha)
    w_pass = _log_wealth(counts, np.array([-margin]), margin, +1)[:, 0, :]
    w_reg = _log_wealth(counts, np.array([0.0]), margin, -1)[:, 0, :]
    hit = (w_pass >= threshold) | (w_reg >= threshold)
    first = np.where(hit.any(axis=1), hit.argmax(axis=1), counts.shape[1])
    return w_pass, w_reg, first


def decide_looks(looks: Sequence[LookCounts], margin: float, alpha: float) -> SequentialResult:
    """The decision after `looks` (in order): the first look where either test rejects, else continue."""
    if margin <= 0:
        raise ValueError("the sequential gate needs a margin δ > 0 (gate.margin)")
    if not looks:
        raise ValueError("no look to decide on")
    counts = np.array([[(lk.n, lk.lost, lk.gained) for lk in looks]], dtype=float)
    w_pass, w_reg, first = (a[0] for a in _first_rejections(counts, margin, alpha))
    stop = min(int(first), len(looks) - 1)
    reg = bool(w_reg[stop] >= np.log(1 / alpha))
    decision: Decision = "continue" if int(first) == len(looks) else "regression" if reg else "pass"
    lower, upper = interval(counts[:, : stop + 1], margin, alpha)
    used = counts[0, : stop + 1].sum(axis=0)
    return SequentialResult(
        decision, stop + 1, int(used[0]), int(used[1]), int(used[2]), lower, upper,
        float(w_pass[stop]), float(w_reg[stop]),
    )  # fmt: skip


def interval(counts: np.ndarray, margin: float, alpha: float) -> tuple[float, float]:
    """The confidence sequence's bounds after these looks ((1, K, 3) counts): the Δ on the grid
    that no look rejected, on either side."""
    grid = np.linspace(-1, 1, round(2 / GRID_STEP) + 1)[1:-1]
    threshold = np.log(1 / alpha)
    kept = (_log_wealth(counts, grid, margin, +1)[0].max(axis=-1) < threshold) & (
        _log_wealth(counts, grid, margin, -1)[0].max(axis=-1) < threshold
    )
    n, lost, gained = counts[0].sum(axis=0)
    if not kept.any():  # only when the grid is coarser than the gap between the two bounds
        return float((gained - lost) / n), float((gained - lost) / n)
    return float(grid[kept][0]), float(grid[kept][-1])


def look_sizes(n: int, looks: int) -> list[int]:
    """Questions per look when n questions are cut into `looks` nearly equal looks."""
    bounds = [n * i // looks for i in range(looks + 1)]
    return [b - a for a, b in itertools.pairwise(bounds)]


@dataclass(frozen=True)
class SimulationCell:
    """One design's operating characteristics at a true (discordance, Δ), by `simulate`: the shares
    of simulated runs that pass, show a regression or stay inconclusive, and the mean share used."""

    discordance: float
    delta: float
    p_pass: float
    p_regression: float
    p_inconclusive: float
    share_used: float  # mean share of the questions scored before the decision (1 when none)


@dataclass(frozen=True)
class Design:
    """A sequential gate as run: `n` questions in `looks` looks, margin δ, level α."""

    n: int
    looks: int
    margin: float
    alpha: float


def simulate(
    design: Design, *, discordance: float, delta: float, reps: int, rng: np.random.Generator
) -> SimulationCell:
    """Operating characteristics by Monte Carlo: i.i.d. questions, a share `discordance` of them
    changed, true Δ = `delta` (lost (disc - Δ)/2, gained (disc + Δ)/2 of the questions)."""
    n, looks, margin, alpha = design.n, design.looks, design.margin, design.alpha
    p_lost, p_gained = (discordance - delta) / 2, (discordance + delta) / 2
    if p_lost < 0 or p_gained < 0:
        raise ValueError(f"discordance {discordance} cannot hold a change of {delta}")
    sizes = look_sizes(n, looks)
    counts = np.stack(
        [rng.multinomial(size, [p_lost, p_gained, 1 - p_lost - p_gained], size=reps) for size in sizes],
        axis=1,
    )  # reps x looks x (lost, gained, same)
    sizes_arr = np.broadcast_to(np.array(sizes, dtype=float), counts.shape[:2])
    seqs = np.stack([sizes_arr, counts[:, :, 0], counts[:, :, 1]], axis=-1)
    _, w_reg, first = _first_rejections(seqs, margin, alpha)
    decided = first < looks
    stop = np.minimum(first, looks - 1)
    regression = decided & (w_reg[np.arange(reps), stop] >= np.log(1 / alpha))
    share = np.where(decided, np.cumsum(sizes)[stop] / n, 1.0)
    p_reg = float(regression.mean())
    p_pass = float((decided & ~regression).mean())
    return SimulationCell(discordance, delta, p_pass, p_reg, float((~decided).mean()), float(share.mean()))
