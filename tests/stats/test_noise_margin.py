"""stats/noise_margin.py: the flip rate's upper limit the floor rests on, the floor itself (where a
noise-only pair passes 95 % of the time), and a measurement's figures at their edges: no question,
one shot seed, no pair."""

from __future__ import annotations

import math

import pytest

from mmlu_track.stats.noise_margin import (
    PASS_PROBABILITY,
    PairNoise,
    Spread,
    flip_upper,
    pair_noise,
    pass_probability,
    recommend,
    smallest_margin,
)


def test_the_floor_rests_on_the_flip_rates_upper_limit() -> None:
    assert flip_upper(0, 0) == 1.0  # nothing measured: anything may flip
    assert flip_upper(0, 114) == pytest.approx(0.0232, abs=1e-4)  # one-sided 95 % Wilson at 0 of 114
    assert flip_upper(6, 100) > 0.06
    margin = smallest_margin(100, 0.06, 0.05)
    assert pass_probability(100, 0.06, margin, 0.05) >= PASS_PROBABILITY
    assert pass_probability(100, 0.06, margin - 1e-3, 0.05) < PASS_PROBABILITY
    assert smallest_margin(150, 0.06, 0.05) < margin  # more questions, a smaller floor
    assert smallest_margin(100, 0.12, 0.05) > margin  # more noise, a larger one


def test_a_measurements_figures_at_their_edges() -> None:
    # `pair_noise` of no questions divided by n = 0 (a RuntimeWarning, an error in this suite).
    nothing = pair_noise("repeat", [], [])
    assert nothing == PairNoise("repeat", 0, 0, 0, 0.0, 1.0, -1.0, 1.0)  # nothing known: the widest
    assert (nothing.n, nothing.flip_rate, nothing.delta) == (0, 0.0, 0.0)
    one = Spread((0.41,))
    assert one.range == 0.0
    assert math.isnan(one.sd)
    with pytest.raises(ValueError, match="no pair of runs to measure noise on"):
        recommend([], 0.01, 0.05)
    quiet = pair_noise("repeat", [True, False] * 50, [True, False] * 50)
    rec = recommend([quiet], 0.0, 0.05)
    assert (rec.n, rec.flip_rate, rec.needed_at_chosen) == (100, 0.0, None)
    assert rec.flip_upper == flip_upper(0, 100)
    assert rec.margin == smallest_margin(100, rec.flip_upper, 0.05)
    assert "pair passes it 80 % of the time from no number of questions" in rec.paragraph(one)
    assert "shot seeds" not in rec.paragraph(one)  # one seed: no spread to speak of
