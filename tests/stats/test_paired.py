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
from mmlu_track.stats import decision, paired

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
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


def test_no_drop_is_the_exact_sign_test_p_value_compared_with_alpha() -> None:
    # The gate's rates sum no_drop over every outcome; it must agree with drop_p to the last outcome.
    b, c = np.meshgrid(np.arange(400), np.arange(400))
    keep = b + c <= 420
    b, c = b[keep], c[keep]
    for alpha in (0.001, 0.01, 0.05, 0.1, 0.25, 0.5):
        expected = decision.drop_p(b, c) >= alpha
        assert np.array_equal(decision.no_drop(b, c, alpha), expected)
        assert expected.any()
        assert not expected.all()


def test_exact_size_reusing_the_last_tails_is_the_size_computed_afresh() -> None:
    # A critical-value search recomputes only the tails whose threshold moved since the last t.
    for n, margin in ((50, 0.05), (1500, 0.02)):
        grid = paired._psi_grid(margin)
        for t in (1.6449, 1.7, 1.65, 1.6449, 2.3, 1.0, 1.70001):
            assert paired.exact_size(n, margin, t) == paired.exact_size(n, margin, t, psi=grid)


def test_noninferiority_with_no_flips_needs_the_rule_of_three_sample_size() -> None:
    # 0 changed answers among n. The score test alone would show δ once z²(1 − δ)/δ < n (268 at
    # δ = 1 point, the normal approximation's count); the exact test's p-value is (1 − δ)ⁿ, the
    # chance that nothing flips when every flip is a loss (the rule of three: about 3/n), so the gate
    # passes two identical runs from ⌈ln α / ln(1 − δ)⌉ = 299 on: the count it states.
    margin, z = 0.01, float(stats.norm.ppf(0.95))
    threshold = z**2 * (1 - margin) / margin
    assert stats.norm.sf(paired.tango_statistic(0, 0, math.ceil(threshold) + 1, -margin)) < 0.05
    assert paired.questions_needed_approx(0.0, margin, 0.05) == math.ceil(threshold) == 268
    exact = math.ceil(math.log(0.05) / math.log(1 - margin))
    assert exact == 299
    assert paired.exact_size(298, margin, float(paired.tango_statistic(0, 0, 298, -margin))) == pytest.approx(
        (1 - margin) ** 298
    )
    assert decision.questions_needed(0.0, margin, 0.05) == exact
    assert not decision.passes(0, 0, exact - 1, margin, 0.05)
    assert all(decision.passes(0, 0, n, margin, 0.05) for n in (exact, exact + 1, 400, 1000))


def test_questions_needed_is_an_n_where_the_gate_passes_that_often() -> None:
    for psi in (0.02, 0.06):
        n = decision.questions_needed(psi, 0.01, 0.05)
        assert (
            decision.pass_rate(n, psi, 0.0, 0.01, 0.05)
            >= 0.8
            > decision.pass_rate(n - 1, psi, 0.0, 0.01, 0.05)
        )
    # Not the normal approximation's count, and PASS needs no drop as well: the approximation
    # promises 80 % at 1,397 questions where the exact rate is higher, at 2 % flips.
    assert decision.questions_needed(0.02, 0.01, 0.05) < paired.questions_needed_approx(0.02, 0.01, 0.05)


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


DOCS = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"


def _doc_rows(first_cell: str) -> dict[str, list[str]]:
    """The rows of docs/statistics.md's tables whose header starts with `first_cell`, by label."""
    rows: dict[str, list[str]] = {}
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"| {first_cell} |"):
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in row.strip("|").split("|")]
                rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize("n", [20, 100, 570, 1140, pytest.param(14042, marks=pytest.mark.slow)])
def test_level_coverage_and_power_at_every_sample_size(n: int) -> None:
    """Exact operating characteristics for discordance 0-20 % at δ = 1 point (see the benchmark),
    and docs/statistics.md's row for this n is what they are."""
    ch = characteristics(n, 0.01, 0.05)
    size, cover = max(ch["size"].values()), min(*ch["cover_at_margin"].values(), *ch["cover_at_0"].values())
    assert size <= 0.05
    assert cover >= 0.94
    if n == 14042:  # the full test set passes a 1-point margin at typical noise (6 % flips)...
        assert 0.94 < ch["power"][0.06] < 0.97  # ... as often as no McNemar drop is shown: not always
    if n <= 100:  # ... and 100 questions cannot
        assert max(ch["power"].values()) < 0.15
    (row,) = [cells for label, cells in _doc_rows("n").items() if label.split(" ")[0] == f"{n:,}"]
    power = [f"{ch['power'][f]:.2f}" for f in (0.02, 0.06, 0.10, 0.20)]
    assert row == [f"{size:.3f}", f"{cover:.3f}", *power]


# δ = 1 point: five exact searches up to 12,453 questions, seconds each (slow); 2 and 5 points: the same rule
@pytest.mark.parametrize("margin", [pytest.param(0.01, marks=pytest.mark.slow), 0.02, 0.05])
def test_the_questions_needed_in_the_docs_are_the_gates_own(margin: float) -> None:
    """docs/statistics.md's questions-needed table (and the README's 299) is `decision.questions_needed`."""
    row = _doc_rows("δ")[f"{100 * margin:g} point{'s' if margin > 0.01 else ''}"]
    assert row == [f"{decision.questions_needed(f, margin, 0.05):,}" for f in (0.0, 0.02, 0.06, 0.10, 0.20)]
    if margin == 0.01:
        readme = (DOCS.parents[1] / "README.md").read_text(encoding="utf-8")
        assert f"(exit 1; {decision.questions_needed(0.0, margin, 0.05)} are needed" in readme


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
