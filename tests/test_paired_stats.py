"""`paired.py` against published worked examples, its own definitions, and its operating
characteristics at every sample size (the fast half of benchmarks/gate_simulation.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats
from statsmodels.stats.proportion import proportion_confint

from mmlu_track.gate.stats import compare
from mmlu_track.settings.config import GateConfig
from mmlu_track.stats import paired

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gate_simulation import characteristics

Z95 = float(stats.norm.ppf(0.975))


def test_tango_interval_reproduces_the_published_worked_example() -> None:
    # Fagerland, Lydersen & Laake, Stat Med 33:2850-2875 (2014), airway hyper-responsiveness before
    # and after stem cell transplantation (Bentur et al. 2009): n11=1, n12=1, n21=7, n22=12.
    # Their Tango asymptotic score interval for the difference: -0.517 to -0.026 (estimate -0.286).
    low, high = paired.tango_interval(7, 1, 21, 0.05)
    assert (round(float(low), 3), round(float(high), 3)) == (-0.517, -0.026)


def test_tango_statistic_is_mcnemar_at_zero_and_its_own_definition_elsewhere() -> None:
    assert float(paired.tango_statistic(5, 9, 100, 0.0)) == pytest.approx((9 - 5) / math.sqrt(14))
    # q̃_b is the constrained maximum-likelihood estimate: check it by maximising the likelihood.
    for b, c, n, d0 in [(7, 1, 21, -0.1), (16, 6, 161, 0.02), (0, 0, 114, -0.01), (3, 4, 285, -0.01)]:

        def nll(q: float, b: int = b, c: int = c, n: int = n, d0: float = d0) -> float:
            return -(b * math.log(q) + c * math.log(q + d0) + (n - b - c) * math.log(1 - 2 * q - d0))

        lo, hi = max(0.0, -d0) + 1e-12, (1 - d0) / 2 - 1e-12
        q = optimize.minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12}).x
        var = n * (2 * q + d0 * (1 - d0))
        expected = (c - b - n * d0) / math.sqrt(var)
        assert float(paired.tango_statistic(b, c, n, d0)) == pytest.approx(expected, rel=1e-5)


def test_intervals_never_collapse_or_leave_minus_one_to_one() -> None:
    for n in (114, 14042):
        low, high = paired.tango_interval(0, 0, n, 0.05)
        assert float(high) == pytest.approx(Z95**2 / (n + Z95**2))  # closed form with no flips
        assert float(low) == pytest.approx(-float(high))
    for n in (1, 2, 6, 20):
        b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1))
        keep = b + c <= n
        low, high = paired.tango_interval(b[keep], c[keep], n, 0.05)
        est = (c[keep] - b[keep]) / n
        assert np.all((low >= -1) & (low <= est) & (est <= high) & (high <= 1))
        assert np.all(high - low > 0)


def test_noninferiority_with_no_flips_needs_the_rule_of_three_sample_size() -> None:
    # 0 changed answers among n: shown only once z²(1 − δ)/δ < n (about 3/n, the rule of three).
    margin, z = 0.01, float(stats.norm.ppf(0.95))
    threshold = z**2 * (1 - margin) / margin
    # Tango's one-sided p-value, 1 − Φ(T(−δ)) (paired.py's docstring)
    assert stats.norm.sf(paired.tango_statistic(0, 0, 114, -margin)) > 0.05
    assert stats.norm.sf(paired.tango_statistic(0, 0, math.ceil(threshold) + 1, -margin)) < 0.05
    assert paired.questions_needed(0.0, margin, 0.05) == math.ceil(threshold)


def test_questions_needed_gives_the_power_it_promises() -> None:
    for psi in (0.02, 0.06):
        n = paired.questions_needed(psi, 0.01, 0.05)
        b, c, w = paired.outcome_distribution(n, psi, 0.0)
        power = float(
            np.sum(w * (paired.tango_statistic(b, c, n, -0.01) >= paired.critical_value(n, 0.01, 0.05)))
        )
        assert 0.75 <= power <= 0.85


def test_macro_intervals_use_kish_effective_sample_size() -> None:
    # Equal subject sizes: the macro interval is the micro interval.
    lost, gained, n = np.array([3, 0, 1]), np.array([1, 2, 0]), np.array([50, 50, 50])
    assert paired.macro_delta_interval(lost, gained, n, 0.05) == pytest.approx(
        tuple(float(v) for v in paired.tango_interval(4, 3, 150, 0.05))
    )
    assert paired.macro_accuracy_interval([10, 20, 30], [50, 50, 50]) == pytest.approx(paired.wilson(60, 150))
    # Unequal sizes: n_eff = 1 / Σ w²/n_k, counts = n_eff times the weighted rates.
    b, c, m = paired.effective_counts([2, 0], [0, 4], [10, 100], [1, 1])
    n_eff = 1 / (0.25 / 10 + 0.25 / 100)
    assert m == pytest.approx(n_eff)
    assert (c - b) / m == pytest.approx(0.5 * (0 - 2) / 10 + 0.5 * (4 - 0) / 100)
    assert (b + c) / m == pytest.approx(0.5 * 2 / 10 + 0.5 * 4 / 100)


def test_macro_intervals_cover_with_small_unequal_subjects() -> None:
    """Coverage by simulation of the macro Δ and macro accuracy intervals (subjects of 5 to 300)."""
    rng = np.random.default_rng(8)
    sizes = np.array([5] * 30 + [50] * 20 + [300] * 7)
    k, sims = len(sizes), 4000
    acc = rng.uniform(0.2, 0.9, k)
    true_delta = rng.uniform(-0.03, 0.03, k)
    flips = 0.06
    q_b, q_c = (flips - true_delta) / 2, (flips + true_delta) / 2
    b = rng.binomial(sizes, q_b, size=(sims, k))
    c = rng.binomial(sizes - b, q_c / (1 - q_b))
    w = 1.0 / k
    n_eff = 1.0 / np.sum(w**2 / sizes)
    psi, delta = np.sum(w * (b + c) / sizes, axis=1), np.sum(w * (c - b) / sizes, axis=1)
    low, high = paired.tango_interval(n_eff * (psi - delta) / 2, n_eff * (psi + delta) / 2, n_eff, 0.05)
    target = float(np.mean(true_delta))
    assert np.mean((low <= target) & (target <= high)) >= 0.94
    correct = rng.binomial(sizes, acc, size=(sims, k))
    covered = 0
    for row in correct[:1000]:
        lo, hi = paired.macro_accuracy_interval(row, sizes)
        covered += lo <= float(np.mean(acc)) <= hi
    assert covered / 1000 >= 0.94


def test_wilson_is_statsmodels_and_keeps_a_whisker_at_the_edges() -> None:
    assert paired.wilson(3, 10) == pytest.approx(proportion_confint(3, 10, method="wilson"))
    assert paired.wilson(0, 2)[1] > 0.5
    assert paired.wilson(2, 2)[0] < 0.5


def test_the_exact_critical_value_keeps_the_level_where_the_asymptotic_test_does_not() -> None:
    n, margin = 100, 0.01
    b, c, w = paired.outcome_distribution(n, 0.06, -margin)
    t = paired.tango_statistic(b, c, n, -margin)
    asymptotic = float(np.sum(w * (t > stats.norm.ppf(0.95))))
    exact = float(np.sum(w * (t >= paired.critical_value(n, margin, 0.05))))
    assert asymptotic > 0.052  # Tango's test alone: 5.5 % at this n
    assert exact <= 0.05


@pytest.mark.parametrize("n", [20, 100, 570, 1140, 14042])
def test_level_coverage_and_power_at_every_sample_size(n: int) -> None:
    """Exact operating characteristics for discordance 0-20 % at δ = 1 point (see the benchmark)."""
    ch = characteristics(n, 0.01, 0.05)
    assert max(ch["size"].values()) <= 0.05
    assert min(*ch["cover_at_margin"].values(), *ch["cover_at_0"].values()) >= 0.94
    if n == 14042:  # the full test set resolves a 1-point margin at typical noise (6 % flips)
        assert ch["power"][0.06] > 0.99
    if n <= 100:  # ... and 100 questions cannot
        assert max(ch["power"].values()) < 0.15


def test_the_gate_pipeline_matches_the_formula_by_monte_carlo() -> None:
    """Per-question simulation through `compare()` agrees with the exact rate within Monte Carlo error."""
    rng = np.random.default_rng(5)
    n, psi, margin, sims = 200, 0.20, 0.01, 300
    shown = 0
    for _ in range(sims):
        draw = rng.multinomial(n, [(psi + margin) / 2, (psi - margin) / 2, 1 - psi])
        x = np.ones(n)
        y = np.ones(n)
        y[: draw[0]] = 0  # lost
        x[draw[0] : draw[0] + draw[1]] = 0  # gained
        half = n // 2
        pairs = {"anatomy": (x[:half], y[:half]), "virology": (x[half:], y[half:])}
        gate = GateConfig(name="test", margin=margin, bootstrap_resamples=0)
        shown += compare(pairs, gate).noninferiority.shown
    b, c, w = paired.outcome_distribution(n, psi, -margin)
    exact = float(
        np.sum(w * (paired.tango_statistic(b, c, n, -margin) >= paired.critical_value(n, margin, 0.05)))
    )
    assert abs(shown / sims - exact) <= 3 * math.sqrt(exact * (1 - exact) / sims) + 1e-9
