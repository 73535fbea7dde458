"""The sequential gate's betting tests against their definition, and their guarantees by simulation
(small n and full MMLU), plus the stratified looks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmlu_track.stats import sequential as sq
from mmlu_track.stats.sequential import Design, LookCounts, decide_looks, simulate

N_MMLU, LOOKS, ALPHA, MARGIN = 14_042, 20, 0.05, 0.01


def _wealth_by_hand(ds: list[list[int]], m: float, margin: float, side: int) -> float:
    """W(m) question by question, λ fixed per look from the earlier looks (the module's definition)."""
    log_w, seen, sq_sum = 0.0, 0, 0.0
    for look in ds:
        second = (sq.SECOND_MOMENT_PRIOR + sq_sum) / (1 + seen)
        worst = max(-side * (d - m) for d in (-1, 0, 1))
        lam = min(margin / second, sq.LAMBDA_CAP / worst)
        for d in look:
            x = side * (d - m)
            log_w += math.log(1 + lam * x)
            sq_sum += x * x
            seen += 1
    return log_w


def test_wealth_from_counts_is_the_product_over_questions() -> None:
    rng = np.random.default_rng(0)
    ds = [list(rng.choice([-1, 0, 1], p=[0.05, 0.9, 0.05], size=size)) for size in (40, 25, 60)]
    counts = np.array([[[len(d), d.count(-1), d.count(1)] for d in ds]], dtype=float)
    for m, side in ((-0.02, +1), (0.0, -1), (0.1, +1), (-0.3, -1)):
        got = sq._log_wealth(counts, np.array([m]), 0.02, side)[0, 0, -1]
        assert got == pytest.approx(_wealth_by_hand(ds, m, 0.02, side), rel=1e-12, abs=1e-12)


def test_one_look_by_hand() -> None:
    # 10 questions, 1 lost, 3 gained, δ = 0.1: the pass test bets λ = min(δ / prior, 0.5 / 0.9).
    lam = min(0.1 / sq.SECOND_MOMENT_PRIOR, 0.5 / 0.9)
    expected = math.log(1 - lam * 0.9) + 6 * math.log(1 + lam * 0.1) + 3 * math.log(1 + lam * 1.1)
    res = decide_looks([LookCounts(10, 1, 3)], 0.1, 0.05)
    assert res.log_wealth_pass == pytest.approx(expected)
    assert res.decision == "continue"
    assert (res.n, res.lost, res.gained, res.delta) == (10, 1, 3, pytest.approx(0.2))


def test_decisions_agree_with_the_interval_and_stop_at_the_first_rejection() -> None:
    rng = np.random.default_rng(1)
    for _ in range(40):
        disc, delta = rng.uniform(0.02, 0.2), rng.uniform(-0.04, 0.02)
        p = [(disc - delta) / 2, (disc + delta) / 2]
        if min(p) < 0:
            continue
        looks = [LookCounts(500, *map(int, rng.multinomial(500, [*p, 1 - sum(p)])[:2])) for _ in range(10)]
        res = decide_looks(looks, MARGIN, ALPHA)
        assert res.lower <= res.delta <= res.upper
        if res.decision == "pass":
            assert res.lower > -MARGIN - sq.GRID_STEP
            assert res.log_wealth_pass >= math.log(1 / ALPHA)
        if res.decision == "regression":
            assert res.upper < sq.GRID_STEP
        if res.decision != "continue":  # no earlier look decided
            earlier = decide_looks(looks[: res.look - 1], MARGIN, ALPHA) if res.look > 1 else None
            assert earlier is None or earlier.decision == "continue"


@pytest.mark.parametrize(("n", "looks", "reps"), [(500, 10, 20_000), (N_MMLU, LOOKS, 20_000)])
@pytest.mark.parametrize("discordance", [0.02, 0.06, 0.10, 0.20])
def test_error_rates_hold_at_every_sample_size(n: int, looks: int, reps: int, discordance: float) -> None:
    rng = np.random.default_rng(int(discordance * 1000) + n)
    mc = 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)  # three Monte Carlo standard errors
    design = Design(n, looks, MARGIN, ALPHA)
    at_margin = simulate(design, discordance=discordance, delta=-MARGIN, reps=reps, rng=rng)
    assert at_margin.p_pass <= ALPHA + mc
    unchanged = simulate(design, discordance=discordance, delta=0.0, reps=reps, rng=rng)
    assert unchanged.p_regression <= ALPHA + mc


def test_targets_on_full_mmlu() -> None:
    """A clearly fine candidate passes on <= 40 % of the questions, a 3-point drop is caught on <= 25 %."""
    rng = np.random.default_rng(2)
    mmlu = Design(N_MMLU, LOOKS, MARGIN, ALPHA)
    fine = simulate(mmlu, discordance=0.06, delta=0.0, reps=20_000, rng=rng)
    assert fine.p_pass > 0.9
    assert fine.share_used <= 0.40
    broken = simulate(mmlu, discordance=0.06, delta=-0.03, reps=20_000, rng=rng)
    assert broken.p_regression > 0.99
    assert broken.share_used <= 0.25


def test_the_interval_covers_the_truth_at_the_stop() -> None:
    rng = np.random.default_rng(3)
    truth, p = -0.005, [0.0525, 0.0475]
    missed = 0
    reps = 300
    for _ in range(reps):
        looks = [LookCounts(702, *map(int, rng.multinomial(702, [*p, 1 - sum(p)])[:2])) for _ in range(LOOKS)]
        res = decide_looks(looks, MARGIN, ALPHA)
        missed += not res.lower <= truth <= res.upper
    assert missed / reps <= 2 * ALPHA + 3 * math.sqrt(2 * ALPHA / reps)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="margin"):
        decide_looks([LookCounts(10, 0, 0)], 0.0, ALPHA)
    with pytest.raises(ValueError, match="cannot hold"):
        simulate(
            Design(100, 5, MARGIN, ALPHA),
            discordance=0.02,
            delta=-0.03,
            reps=10,
            rng=np.random.default_rng(0),
        )
    assert sq.look_sizes(10, 4) == [2, 3, 2, 3]
