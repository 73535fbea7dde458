"""gate/stats.py: the paired statistics against their definitions, and their validity by simulation;
a p-value of exactly 0 (a total regression) is evidence, never read as 1."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from mmlu_track.gate.run import decide
from mmlu_track.gate.stats import (
    Comparison,
    ComparisonError,
    Delta,
    compare,
    deltas,
    noninferiority,
    pair,
    untested_as_one,
)
from mmlu_track.records.results import QuestionResult
from mmlu_track.settings.config import GateConfig
from mmlu_track.settings.subjects import SUBJECTS
from mmlu_track.stats.paired import critical_value, tango_interval, tango_limit, tango_statistic

Z95 = float(stats.norm.ppf(0.975))
GATE = GateConfig(name="default")
FAST = GateConfig(name="test", bootstrap_resamples=0)

# Slow: each simulates the whole gate many times (its level is checked exactly in stats/test_paired.py).
SIMULATED = pytest.mark.slow


def _qr(subject: str, i: int, ok: bool) -> QuestionResult:
    return QuestionResult(subject, i, "h", 0, 1, False, None, "A", 0 if ok else 1, 0, None)


def test_micro_delta_se_and_mcnemar_by_hand() -> None:
    # 100 questions: 10 lost (b), 4 gained (c), the rest unchanged.
    x = np.array([1] * 10 + [0] * 4 + [1] * 50 + [0] * 36, dtype=float)
    y = np.array([0] * 10 + [1] * 4 + [1] * 50 + [0] * 36, dtype=float)
    [d] = deltas([("micro", x, y)], 0.05)
    assert (d.lost, d.gained, d.n) == (10, 4, 100)
    assert d.delta == pytest.approx(-0.06)
    assert d.se == pytest.approx(math.sqrt(10 + 4 - (4 - 10) ** 2 / 100) / 100)
    low, high = tango_interval(10, 4, 100, 0.05)
    assert (d.ci_low, d.ci_high) == (pytest.approx(float(low)), pytest.approx(float(high)))
    # The score interval is wider than Wald's here, and inside [-1, 1] by construction.
    assert d.ci_low < -0.06 - Z95 * d.se
    assert d.p_regression == pytest.approx(stats.binomtest(10, 14, 0.5, alternative="greater").pvalue)
    assert d.p_improvement == pytest.approx(stats.binomtest(4, 14, 0.5, alternative="greater").pvalue)


def test_noninferiority_is_tangos_score_test_with_an_exact_critical_value() -> None:
    ni = noninferiority(40, 30, 2000, 0.01, 0.05)
    t = float(tango_statistic(40, 30, 2000, -0.01))
    assert ni.shown == (t >= critical_value(2000, 0.01, 0.05))
    assert ni.p_value >= float(stats.norm.sf(t))
    assert ni.shown == (ni.lower_bound > -0.01)
    # No changed answer is not proof of no change: 114 questions cannot show a 1-point margin.
    none_changed = noninferiority(0, 0, 114, 0.01, 0.05)
    assert not none_changed.shown
    assert none_changed.lower_bound < -(1.645**2) / (114 + 1.645**2)  # the exact test's, below the score one
    assert none_changed.questions_needed == 299  # where the gate first passes two identical runs
    assert noninferiority(0, 0, 1000, 0.01, 0.05).shown
    # At 298 questions the score limit alone is −0.90 points: the bound printed beside "not shown"
    # is the exact rule's, below −δ; at 299 the gate passes and its bound is above −δ.
    at_298, at_299 = noninferiority(0, 0, 298, 0.01, 0.05), noninferiority(0, 0, 299, 0.01, 0.05)
    assert float(tango_limit(0, 0, 298, 1.6448536269514722, "lower")) > -0.01
    assert (at_298.shown, at_299.shown) == (False, True)
    assert at_298.lower_bound <= -0.01 < at_299.lower_bound


def test_macro_correction_bootstrap_and_categories() -> None:
    rng = np.random.default_rng(1)
    subjects = ["anatomy", "virology", "college_physics", "philosophy"]
    base, cand = [], []
    for s, n in zip(subjects, [40, 60, 80, 100], strict=True):
        for i in range(n):
            ok = bool(rng.random() < 0.6)
            flip = bool(rng.random() < (0.3 if s == "virology" and ok else 0.05))
            base.append(_qr(s, i, ok))
            cand.append(_qr(s, i, ok != flip))
    comp = compare(pair(base, cand), GateConfig(name="test", bootstrap_resamples=500, seed=3))
    per = {d.name: d for d in comp.subjects}
    assert comp.macro.delta == pytest.approx(np.mean([d.delta for d in comp.subjects]))
    assert comp.macro.se == pytest.approx(math.sqrt(sum(d.se**2 for d in comp.subjects)) / 4)
    assert comp.macro.ci_low < comp.macro.delta < comp.macro.ci_high
    raw = [per[s].p_regression for s in sorted(per)]
    holm = multipletests(raw, alpha=0.05, method="holm")[1]
    assert [per[s].p_regression_adj for s in sorted(per)] == pytest.approx(list(holm))
    assert comp.bootstrap is not None
    lo, hi = comp.bootstrap["micro"]
    assert lo < comp.micro.delta < hi
    assert abs((hi - lo) - (comp.micro.ci_high - comp.micro.ci_low)) < 0.5 * (
        comp.micro.ci_high - comp.micro.ci_low
    )
    assert {c.name for c in comp.categories} == {"STEM", "humanities", "other (business, health, misc.)"}
    assert per["virology"].delta < 0


def _flipped_runs(sizes: dict[str, int], flip: float, seed: int) -> tuple[list[QuestionResult], ...]:
    rng = np.random.default_rng(seed)
    base, cand = [], []
    for s, n in sizes.items():
        for i in range(n):
            ok = bool(rng.random() < 0.6)
            base.append(_qr(s, i, ok))
            cand.append(_qr(s, i, ok != bool(rng.random() < flip)))
    return base, cand


@pytest.mark.parametrize(
    ("sizes", "flip"),
    [({"anatomy": 12, "virology": 16, "philosophy": 20}, 0.5), (dict.fromkeys(SUBJECTS[:20], 100), 0.06)],
    ids=["3 subjects x 12-20", "20 subjects x 100"],
)
def test_the_bootstrap_drawn_as_counts_is_scipys_stratified_one(sizes: dict[str, int], flip: float) -> None:
    """By simulation, at small and large n: the intervals drawn as multinomial counts agree with
    `scipy.stats.bootstrap` resampling every question within its subject, within Monte Carlo error."""
    base, cand = _flipped_runs(sizes, flip, seed=5)
    pairs = pair(base, cand)
    got = compare(pairs, GateConfig(name="test", bootstrap_resamples=20_000, seed=1)).bootstrap
    assert got is not None
    samples = [y - x for x, y in pairs.values()]
    n = np.array([len(s) for s in samples])

    def micro(*ds: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(np.sum([np.sum(d, axis=axis) for d in ds], axis=0) / n.sum())

    def macro(*ds: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(np.mean([np.mean(d, axis=axis) for d in ds], axis=0))

    # At small n the statistics live on a lattice (steps of 1/N for micro, 1/(K n_k) for macro): a
    # quantile of either draw can sit one step off.
    steps = {"micro": 1 / n.sum(), "macro": 1 / (len(n) * n.min())}
    for name, statistic in (("micro", micro), ("macro", macro)):
        res = stats.bootstrap(samples, statistic, n_resamples=20_000, method="percentile", rng=7)
        ci = res.confidence_interval
        # Each end is a 2.5 % quantile of a distribution whose SD is the standard error: its Monte
        # Carlo noise at 20,000 draws is 0.02 SD; two draws differ by 0.03 SD, 0.1 is over 3 of those.
        for mine, theirs in zip(got[name], (ci.low, ci.high), strict=True):
            assert abs(mine - theirs) <= 0.1 * res.standard_error + steps[name], (name, mine, theirs)
    # The stratified bootstrap's SD of micro Δ is known in closed form: sqrt(Σ n_k var_k) / N.
    sd_micro = math.sqrt(sum(len(s) * np.var(s) for s in samples)) / n.sum()
    low, high = got["micro"]
    assert (high - low) == pytest.approx(2 * 1.959964 * sd_micro, rel=0.1)


def test_identical_runs_are_no_change_but_few_questions_show_nothing() -> None:
    def same(per_subject: int) -> Comparison:
        runs = [_qr(s, i, i % 3 == 0) for s in ("anatomy", "virology") for i in range(per_subject)]
        return compare(pair(runs, runs), GateConfig(name="test", bootstrap_resamples=200))

    small = same(30)
    assert small.micro.delta == 0.0
    assert small.micro.p_regression == 1.0
    assert small.micro.ci_low < 0 < small.micro.ci_high  # never the point [0, 0]
    assert small.macro.ci_low < 0 < small.macro.ci_high
    assert small.bootstrap is None  # a percentile bootstrap of no flips is a point: not shown
    assert not any(d.flagged or d.improved for d in small.subjects)
    verdict = decide(small, GATE)
    assert (verdict.status, verdict.exit_code) == ("inconclusive", 1)
    assert "299 questions are needed for two runs that differ by nothing" in " ".join(verdict.reasons)
    large = same(200)
    assert decide(large, GATE).status == "pass"


def test_different_questions_are_refused() -> None:
    a = [_qr("anatomy", i, True) for i in range(5)]
    with pytest.raises(ComparisonError, match="different questions"):
        pair(a, a[:4])


# --- validity by simulation: the full test set's subject sizes are approximated by 57 x 246 ----------

N_SUBJECTS, PER_SUBJECT = 57, 246  # 14,022 questions, about MMLU's 14,042
FLIP = 0.06  # share of questions that flip between two runs of the same model (noise)


def _simulate(
    rng: np.random.Generator, drop: float = 0.0, drop_subject: float = 0.0
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    pairs = {}
    for k in range(N_SUBJECTS):
        x = (rng.random(PER_SUBJECT) < 0.55).astype(float)
        flips = rng.random(PER_SUBJECT) < FLIP
        # Noise without a real change: a flipped question is lost or gained with equal chance.
        x[flips] = rng.integers(0, 2, flips.sum())
        y = x.copy()
        y[flips] = 1.0 - x[flips]
        if drop or (drop_subject and k == 0):
            share = drop_subject if k == 0 else drop
            lose = (x == 1) & (rng.random(PER_SUBJECT) < share / 0.55)
            y[lose] = 0.0
        pairs[f"s{k:02d}"] = (x, y)
    return pairs


def _gate(pairs: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[str, int]:
    # category() needs real subject names: map the simulated strata onto them.
    from mmlu_track.settings.subjects import SUBJECTS

    named = {SUBJECTS[i]: v for i, v in enumerate(pairs.values())}
    comp = compare(named, FAST)
    return decide(comp, GATE).status, sum(d.flagged for d in comp.subjects)


def test_the_limits_solved_together_are_each_one_solved_alone() -> None:
    """compare() solves every limit in one bisection: each group's interval, the macro's and the
    verdict's lower limit are, to the last bit, what the functions that solve them alone give."""
    from mmlu_track.stats import decision, paired

    rng = np.random.default_rng(11)
    named = {SUBJECTS[i]: v for i, v in enumerate(_simulate(rng, drop_subject=0.2).values())}
    comp = compare(named, GATE)
    every = [*comp.subjects, *comp.categories, comp.micro]
    alone = deltas([(d.name, *(named[d.name] if d.name in named else _group(named, d))) for d in every], 0.05)
    assert [(d.ci_low, d.ci_high) for d in every] == [(d.ci_low, d.ci_high) for d in alone]
    b, c, n = ([getattr(d, f) for d in comp.subjects] for f in ("lost", "gained", "n"))
    assert (comp.macro.ci_low, comp.macro.ci_high) == paired.macro_delta_interval(b, c, n, 0.05)
    m = comp.micro
    assert comp.noninferiority.lower_bound == decision.lower_limit(m.lost, m.gained, m.n, GATE.delta, 0.05)
    decided = comp.noninferiority.decided
    assert comp.noninferiority == noninferiority(m.lost, m.gained, m.n, GATE.delta, 0.05, decided=decided)


def _group(named: dict[str, tuple[np.ndarray, np.ndarray]], d: Delta) -> tuple[np.ndarray, np.ndarray]:
    from mmlu_track.settings.subjects import category

    keys = [s for s in named if d.name == "micro" or category(s) == d.name]
    return np.concatenate([named[s][0] for s in keys]), np.concatenate([named[s][1] for s in keys])


def test_a_comparison_leaves_the_collector_as_it_found_it() -> None:
    # compare() freezes the heap around statsmodels' gc.collect(): nothing may stay frozen.
    import gc

    before = gc.get_freeze_count()
    _gate(_simulate(np.random.default_rng(1)))
    assert gc.get_freeze_count() == before == 0
    gc.freeze()  # a heap frozen by the caller stays frozen (its count may drop as objects die)
    try:
        _gate(_simulate(np.random.default_rng(2)))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@SIMULATED
def test_aa_false_regression_rate_is_at_most_alpha() -> None:
    rng = np.random.default_rng(2024)
    sims = 1000
    failures = sum(_gate(_simulate(rng))[0] != "pass" for _ in range(sims))
    # Nominal 5%; allow Monte Carlo error (sd of the rate at 5% over 1000 runs is about 0.7%).
    assert failures / sims <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / sims)


@SIMULATED
def test_power_a_three_point_regression_is_detected() -> None:
    rng = np.random.default_rng(7)
    sims = 100  # its power is near 1: 100 runs tell it from 0.8 (sd of the estimate 4 points there)
    detected = sum(_gate(_simulate(rng, drop=0.03))[0] == "regression" for _ in range(sims))
    assert detected / sims >= 0.8


@SIMULATED
def test_power_one_subject_losing_twenty_points_is_flagged() -> None:
    rng = np.random.default_rng(11)
    sims = 100
    flagged = sum(_gate(_simulate(rng, drop_subject=0.20))[1] >= 1 for _ in range(sims))
    assert flagged / sims >= 0.8


@SIMULATED
def test_the_pass_rule_and_pass_rate_are_the_gates_own_decide() -> None:
    """`decision.passes` is decide()'s PASS on every drawn outcome, and `decision.pass_rate` (the
    power tables, the noise floor, the questions needed) is the rate at which decide() passes pairs
    drawn with that flip share: within Monte Carlo error, at two margins."""
    from mmlu_track.stats import decision

    rng = np.random.default_rng(49)
    for n, psi, margin, sims in ((200, 0.04, 0.03, 200), (120, 0.10, 0.08, 200)):
        gate = GateConfig(name="test", margin=margin, bootstrap_resamples=0)
        passed = 0
        for _ in range(sims):
            x = (rng.random(n) < 0.6).astype(float)
            flips = rng.random(n) < psi
            x[flips] = rng.integers(0, 2, int(flips.sum()))  # a flip is a loss or a gain, evenly
            y = np.where(flips, 1.0 - x, x)
            comp = compare({"anatomy": (x, y)}, gate)
            verdict = decide(comp, gate).status == "pass"
            assert verdict == bool(decision.passes(comp.micro.lost, comp.micro.gained, n, margin, 0.05))
            passed += verdict
        # Δ = 0 and the flip share is psi: the exact rate the tables print.
        expected = decision.pass_rate(n, psi, 0.0, margin, 0.05)
        assert 0.2 < expected < 0.95  # both outcomes drawn often
        assert abs(passed / sims - expected) <= 3 * math.sqrt(expected * (1 - expected) / sims)


def _results(correct: list[bool], subject: str = "anatomy") -> list[QuestionResult]:
    return [
        QuestionResult(subject, i, "h", 5, 10, False, (-1.0, -2.0, -2.0, -2.0), None, 0 if ok else 1, 0, 1.0)
        for i, ok in enumerate(correct)
    ]


def test_a_total_regression_has_p_zero_and_is_flagged() -> None:
    """1,100 questions all lost: the exact one-sided p is 0.5^1100, which underflows to 0.0; `p or
    1.0` read it as 1 and the subject's corrected p as 1: not flagged."""
    n = 1100
    comp = compare(pair(_results([True] * n), _results([False] * n)), GateConfig(name="test"))
    assert comp.micro.p_regression == 0.0
    (subject,) = comp.subjects
    assert subject.p_regression == 0.0
    assert subject.p_regression_adj == 0.0
    assert subject.flagged
    assert untested_as_one(0.0) == 0.0
    assert untested_as_one(None) == 1.0


def test_two_mmlu_pro_runs_are_compared_by_origin_as_a_single_run_is_reported() -> None:
    """A single MMLU-Pro run's report shows its questions taken from MMLU beside the new ones; the
    comparison of two had no such rows (issue 86): the same groups, each question in its own."""
    import dataclasses

    from mmlu_track.gate.stats import origins
    from mmlu_track.records.results import ORIGINS, aggregate

    def pro(correct: list[bool], subject: str) -> list[QuestionResult]:
        srcs = ["ori_mmlu-anatomy", "stemez-Physics", "ori_mmlu-virology", "theoremqa"]
        return [dataclasses.replace(r, src=srcs[r.index % 4]) for r in _results(correct, subject)]

    base = pro([True, True, False, False] * 2, "physics") + pro([True, False, True, False], "law")
    cand = pro([True, False, False, True] * 2, "physics") + pro([False, False, True, True], "law")
    groups = origins(base, cand)
    assert groups is not None
    assert [name for name, _, _ in groups] == list(ORIGINS)
    assert origins(_results([True]), _results([False])) is None  # MMLU: by category instead
    comp = compare(pair(base, cand), GateConfig("default"), groups=groups)
    by_name = {d.name: d for d in comp.categories}
    single = aggregate(cand).categories  # the candidate's own report groups its questions so
    assert set(by_name) == set(single) == set(ORIGINS)
    for name, d in by_name.items():
        assert d.n == single[name].n
        assert d.candidate_acc == pytest.approx(single[name].acc)
    from_mmlu = by_name[ORIGINS[0]]
    assert (from_mmlu.n, from_mmlu.lost, from_mmlu.gained) == (6, 1, 0)  # positions 0 and 2 of each four
    assert sum(d.n for d in comp.categories) == comp.micro.n
