"""Paired statistics between two runs over the same questions (no I/O, no policy).

Per question, x and y in {0,1} are the baseline's and candidate's correctness, d = y - x;
b = questions the candidate lost, c = questions it gained, n = questions, Δ = (c - b)/n.
The formulas are in `paired.py`; this module applies them to groups of questions.
- Intervals for Δ (micro, each category, each subject): Tango's score interval for paired
  proportions, level 1 - α. Always inside [-1, 1], never a point: with no answer changed among n
  it is ±z²/(n + z²).
- Macro Δ_M = mean over subjects of Δ_k; its score interval uses Kish's effective sample size
  (equal to the micro interval when subjects are equal in size).
- Exact one-sided McNemar per group: b | b+c ~ Binomial(b+c, 1/2) under no change (scipy's
  binomial tail, the value `scipy.stats.binomtest(b, b+c, alternative="greater")` gives).
- Across subjects: Holm (default) or Benjamini-Hochberg (`statsmodels` multipletests).
- Non-inferiority of the micro Δ against a margin δ, and the numbers beside it, by the gate's own
  rule (`stats.decision`): Tango's score test of H0: Δ <= -δ with an exact unconditional critical
  value (its level holds at every n), the limit the verdict holds against -δ, and, when neither it
  nor a drop is shown, the questions at which a pair at the observed discordance that changed
  nothing passes 80 % of the time.
- A subject-stratified paired bootstrap (each subject resampled within itself, drawn as counts:
  `_bootstrap`) gives a second interval for micro and macro, only where a percentile bootstrap is
  sound: at least BOOTSTRAP_MIN_FLIPS changed answers and BOOTSTRAP_MIN_PER_SUBJECT questions in
  every subject (with no flips it collapses to a point).

`pts` writes a Δ as the reports and verdicts show it: signed percentage points.

`python -m mmlu_track.compare` is the command line (a shim into `gate.main`).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from mmlu_track.records.results import ORIGINS, QuestionResult, origin
from mmlu_track.settings.config import GateConfig
from mmlu_track.settings.subjects import CATEGORIES, category
from mmlu_track.stats import decision, paired
from mmlu_track.support.errors import MmluTrackError

BOOTSTRAP_MIN_FLIPS = 20
BOOTSTRAP_MIN_PER_SUBJECT = 10
INTERVALS = "Tango score (micro, categories, subjects; macro at Kish's effective sample size)"


def pts(x: float) -> str:
    """A Δ (a fraction) as signed percentage points, without the unit: `-0.0123` is `-1.23`."""
    return f"{100 * x:+.2f}"


class ComparisonError(MmluTrackError):
    """The two runs cannot be compared (different questions, settings, or unknown runs)."""


@dataclass(frozen=True)
class Delta:
    """Candidate minus baseline accuracy over one group of paired questions."""

    name: str
    n: int
    baseline_acc: float
    candidate_acc: float
    delta: float
    se: float  # sd(d)/sqrt(n): descriptive only, the intervals are score intervals
    ci_low: float
    ci_high: float
    lost: int  # b: right in the baseline, wrong in the candidate
    gained: int  # c
    p_regression: float | None  # exact one-sided McNemar, b > c (None for macro)
    p_improvement: float | None
    p_regression_adj: float | None = None  # corrected across subjects
    p_improvement_adj: float | None = None
    flagged: bool = False  # significant after correction and a drop of at least min_effect
    improved: bool = False


@dataclass(frozen=True)
class NonInferiority:
    """Tango's score test of H0: Δ micro <= -margin, with an exact critical value."""

    margin: float
    lower_bound: float  # the one-sided limit the verdict holds against -margin (`decision.lower_limit`)
    p_value: float  # the larger of the asymptotic and the exact p-value (asymptotic when T >= t* + 1)
    shown: bool
    discordance: float  # share of questions whose correctness changed
    alpha: float = 0.05
    decided: bool = False  # a drop is shown: the verdict rests on it, not on this test

    @functools.cached_property
    def questions_needed(self) -> int | None:
        """The n at which a pair that changed nothing at this discordance passes 80 % of the time;
        None where the verdict does not rest on it (shown, or a drop shown). Searched on first use
        (seconds at large n: only an INCONCLUSIVE verdict prints it), at the share the verdict
        prints (to a tenth of a percent): the count it states is the one for the figure beside it."""
        if self.shown or self.decided or self.margin <= 0:
            return None
        return decision.questions_needed(round(self.discordance, 3), self.margin, self.alpha)

    def to_json(self) -> dict[str, Any]:
        """The test as report.json holds it: its fields and `questions_needed` (searched now, on first
        use)."""
        return {**dataclasses.asdict(self), "questions_needed": self.questions_needed}


@dataclass(frozen=True)
class Comparison:
    """The paired statistics of two runs over the same questions under one gate's `settings`: Δ micro
    and macro, each category and subject, the non-inferiority test, and the bootstrap intervals where
    sound (None elsewhere). Δs are fractions, candidate minus baseline."""

    settings: GateConfig  # its alpha, margin, min_effect, correction and bootstrap settings
    micro: Delta
    macro: Delta
    bootstrap: dict[str, tuple[float, float]] | None  # micro/macro percentile intervals, where sound
    noninferiority: NonInferiority
    subjects: tuple[Delta, ...]
    categories: tuple[Delta, ...]
    intervals: str = INTERVALS


Pairs = dict[str, tuple[np.ndarray, np.ndarray]]


def pair(
    baseline: Sequence[QuestionResult], candidate: Sequence[QuestionResult], metric: str = "accuracy"
) -> Pairs:
    """Per subject, aligned outcome arrays (x, y): correct as given, or with `metric="circular"`
    correct in every rotation (`QuestionResult.outcome`); refuses runs over different questions."""
    base = {(r.subject, r.index): r for r in baseline}
    cand = {(r.subject, r.index): r for r in candidate}
    if base.keys() != cand.keys():
        only_b, only_c = len(base.keys() - cand.keys()), len(cand.keys() - base.keys())
        raise ComparisonError(
            f"the runs scored different questions ({only_b} only in the baseline, "
            f"{only_c} only in the candidate)"
        )
    out: dict[str, tuple[list[float], list[float]]] = {}
    for key in sorted(base):
        xs, ys = out.setdefault(key[0], ([], []))
        xs.append(float(base[key].outcome(metric)))
        ys.append(float(cand[key].outcome(metric)))
    return {s: (np.array(x), np.array(y)) for s, (x, y) in out.items()}


def _mcnemar(b: np.ndarray, c: np.ndarray) -> tuple[list[float], list[float]]:
    """One-sided exact p-values for a regression (b > c) and an improvement (c > b), per group, all
    groups in one call (the gate's simulations compare thousands of times)."""
    return [float(v) for v in decision.drop_p(b, c)], [float(v) for v in decision.drop_p(c, b)]


Group = tuple[str, np.ndarray, np.ndarray]  # (name, x, y)


def _counts(groups: Sequence[Group]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lost, gained, questions) per group, as float arrays."""
    counts = [(np.sum(y < x), np.sum(y > x), len(x)) for _, x, y in groups]
    b, c, n = (np.array(v, dtype=float) for v in zip(*counts, strict=True))
    return b, c, n


def _deltas(
    groups: Sequence[Group], counts: Sequence[np.ndarray], lows: np.ndarray, highs: np.ndarray
) -> list[Delta]:
    """Each group's Δ with its interval (lows, highs) and McNemar p-values."""
    b, c, _ = counts
    p_regs, p_imps = _mcnemar(b, c)
    out = []
    for (name, x, y), lost, gained, low, high, p_reg, p_imp in zip(
        groups, b, c, lows, highs, p_regs, p_imps, strict=True
    ):
        size = len(x)
        se = math.sqrt(max(lost + gained - (gained - lost) ** 2 / size, 0.0)) / size  # sd(y - x)/sqrt(n)
        out.append(
            Delta(name, size, float(x.sum()) / size, float(y.sum()) / size, (gained - lost) / size, se,
                  float(low), float(high), int(lost), int(gained), p_reg, p_imp)
        )  # fmt: skip
    return out


def deltas(groups: Sequence[Group], alpha: float) -> list[Delta]:
    """Δ of each (name, x, y) group with its two-sided (1 - alpha) score interval and McNemar
    p-values; the intervals of all groups are solved together (one vectorised bisection)."""
    counts = _counts(groups)
    return _deltas(groups, counts, *paired.tango_interval(*counts, alpha))


def _macro(subjects: Sequence[Delta], interval: tuple[float, float]) -> Delta:
    """The unweighted mean over subjects, with its score interval (`paired.macro_delta_interval`)."""
    k = len(subjects)
    return Delta(
        "macro",
        sum(p.n for p in subjects),
        sum(p.baseline_acc for p in subjects) / k,
        sum(p.candidate_acc for p in subjects) / k,
        sum(p.delta for p in subjects) / k,
        math.sqrt(sum(p.se**2 for p in subjects)) / k,  # se_k^2 = var_k(d) / n_k
        *interval,
        sum(p.lost for p in subjects),
        sum(p.gained for p in subjects),
        None,
        None,
    )


def noninferiority(
    lost: int, gained: int, n: int, margin: float, alpha: float, *, decided: bool = False
) -> NonInferiority:
    """H0: Δ <= -margin against H1: Δ > -margin (`stats.decision`). `decided`: a drop is shown,
    so the verdict does not rest on it and no questions-needed count is searched."""
    lower = decision.lower_limit(lost, gained, n, margin, alpha)
    return _noninferiority((lost, gained, n), margin, alpha, decided, lower)


def _noninferiority(
    counts: tuple[int, int, int], margin: float, alpha: float, decided: bool, lower: float
) -> NonInferiority:
    # `noninferiority` with its lower limit solved by the caller (`compare` solves all its limits at once).
    lost, gained, n = counts
    t = float(paired.tango_statistic(lost, gained, n, -margin))
    shown = bool(decision.noninferior(lost, gained, n, margin, alpha))
    p_value = float(stats.norm.sf(t))
    if t < paired.critical_value(n, margin, alpha) + 1:  # near the boundary: the exact one
        p_value = max(p_value, paired.exact_size(n, margin, t))
    return NonInferiority(margin, lower, p_value, shown, (lost + gained) / n, alpha, decided)


def _bootstrap(pairs: Pairs, settings: GateConfig) -> dict[str, tuple[float, float]] | None:
    """The subject-stratified paired percentile bootstrap of micro and macro Δ, each subject's d
    resampled within itself, drawn as counts: a resample of a discrete sample is fixed by how many
    times it takes each value, multinomial over the sample's values with their observed shares (the
    resampling vector, Efron & Tibshirani 1993, An Introduction to the Bootstrap, ch. 20). The
    bootstrap distribution is exactly `scipy.stats.bootstrap`'s over the same strata; drawing 3
    counts per subject instead of every question is 0.7 s -> ~10 ms on full MMLU. The interval is
    scipy's percentile one: the distribution's linear (Hyndman-Fan type 7) quantiles at α/2 and
    1 - α/2."""
    samples = [y - x for x, y in pairs.values()]
    flips = sum(int(np.count_nonzero(s)) for s in samples)
    if flips < BOOTSTRAP_MIN_FLIPS or min(len(s) for s in samples) < BOOTSTRAP_MIN_PER_SUBJECT:
        return None
    rng = np.random.default_rng(settings.seed)
    sizes = np.array([len(s) for s in samples], dtype=float)
    sums = np.empty((settings.bootstrap_resamples, len(samples)))  # each resample's Σ d per subject
    for k, sample in enumerate(samples):
        values, counts = np.unique(sample, return_counts=True)
        sums[:, k] = rng.multinomial(len(sample), counts / len(sample), size=len(sums)) @ values
    a = settings.alpha / 2
    out = {}
    for name, theta in (("micro", sums.sum(axis=1) / sizes.sum()), ("macro", (sums / sizes).mean(axis=1))):
        low, high = np.quantile(theta, [a, 1 - a])
        out[name] = (float(low), float(high))
    return out


def untested_as_one(p: float | None) -> float:
    """A p-value, or 1 where no test was made (None); an exact 0 stays 0 (a total regression's
    binomial tail underflows to 0.0, which `p or 1.0` would have read as no evidence at all)."""
    return 1.0 if p is None else p


def _adjusted(p_values: list[float], alpha: float, method: str) -> list[float]:
    """Multiplicity-adjusted p-values (statsmodels' multipletests)."""
    from statsmodels.stats.multitest import multipletests

    # Its Holm branch calls gc.collect() on every call: in a process holding torch and a model that
    # is half a second per comparison (a sequential gate compares at every look). A frozen heap
    # makes that collection cheap; unfreezing puts every object back where it was. A heap the
    # caller froze itself (a pre-forking server) stays as it was.
    ours = gc.get_freeze_count() == 0
    if ours:
        gc.freeze()
    try:
        return [float(p) for p in multipletests(p_values, alpha=alpha, method=method)[1]]
    finally:
        if ours:
            gc.unfreeze()


def origins(
    baseline: Sequence[QuestionResult], candidate: Sequence[QuestionResult], metric: str = "accuracy"
) -> list[Group] | None:
    """MMLU-Pro's questions grouped by where they came from (`records.results.ORIGINS`: taken from
    MMLU, or new), as a single run's report groups them: the groups of `compare(..., groups=)`; None
    for MMLU's questions (no origin: `compare` groups them by category)."""
    base = {(r.subject, r.index): r for r in baseline}
    by: dict[str, tuple[list[float], list[float]]] = {}
    for r in sorted(candidate, key=lambda r: (r.subject, r.index)):
        if (where := origin(r)) is not None and (b := base.get((r.subject, r.index))) is not None:
            xs, ys = by.setdefault(where, ([], []))
            xs.append(float(b.outcome(metric)))
            ys.append(float(r.outcome(metric)))
    return [(o, np.array(by[o][0]), np.array(by[o][1])) for o in ORIGINS if o in by] if by else None


def _categories(pairs: Pairs) -> list[Group]:
    """MMLU's subjects in their categories, in the categories' order."""
    by_cat: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for s, (x, y) in pairs.items():
        xs, ys = by_cat.setdefault(category(s), ([], []))
        xs.append(x)
        ys.append(y)
    return [
        (c, np.concatenate(by_cat[c][0]), np.concatenate(by_cat[c][1])) for c in CATEGORIES if c in by_cat
    ]


def compare(pairs: Pairs, settings: GateConfig, *, groups: Sequence[Group] | None = None) -> Comparison:
    """All paired statistics for two runs; subjects flagged per `settings` (see module docs).
    `groups`: the rows between subjects and the whole (an MMLU-Pro run's subjects are its categories:
    its questions by origin, `origins`); None: MMLU's subjects in their categories."""
    if not pairs:
        raise ComparisonError("no paired questions to compare")
    a = settings.alpha
    x_all = np.concatenate([x for x, _ in pairs.values()])
    y_all = np.concatenate([y for _, y in pairs.values()])
    cats = list(groups) if groups is not None else _categories(pairs)
    rows = [*((s, x, y) for s, (x, y) in pairs.items()), *cats, ("micro", x_all, y_all)]
    b, c, n = _counts(rows)
    k, g = len(pairs), len(rows)
    macro_counts = paired.effective_counts(b[:k], c[:k], n[:k], np.ones(k))  # macro_delta_interval's
    # Every limit in one bisection: each group's two-sided interval, the macro's, and the lower
    # limit the verdict holds against -delta (`decision.lower_limit`).
    z = float(stats.norm.ppf(1 - a / 2))
    limits = paired.score_limits(
        np.concatenate([b, b, [macro_counts[0]] * 2, b[-1:]]),
        np.concatenate([c, c, [macro_counts[1]] * 2, c[-1:]]),
        np.concatenate([n, n, [macro_counts[2]] * 2, n[-1:]]),
        np.concatenate([np.full(2 * g + 2, z), [decision.limit_level(int(n[-1]), settings.delta, a)]]),
        np.concatenate([np.full(g, True), np.full(g, False), [True, False, True]]),
    )
    lows, highs, (macro_low, macro_high, lower) = limits[:g], limits[g : 2 * g], limits[2 * g :]
    everything = _deltas(rows, (b, c, n), lows, highs)
    subjects, categories, micro = everything[:k], tuple(everything[k:-1]), everything[-1]
    adj_reg = _adjusted([untested_as_one(s.p_regression) for s in subjects], a, settings.correction)
    adj_imp = _adjusted([untested_as_one(s.p_improvement) for s in subjects], a, settings.correction)
    subjects = [
        replace(
            s,
            p_regression_adj=float(ar),
            p_improvement_adj=float(ai),
            flagged=bool(ar < a and -s.delta >= settings.min_effect),
            improved=bool(ai < a and s.delta >= settings.min_effect),
        )
        for s, ar, ai in zip(subjects, adj_reg, adj_imp, strict=True)
    ]
    return Comparison(
        settings=settings,
        micro=micro,
        macro=_macro(subjects, (float(macro_low), float(macro_high))),
        bootstrap=_bootstrap(pairs, settings) if settings.bootstrap_resamples > 0 else None,
        noninferiority=_noninferiority(
            (micro.lost, micro.gained, micro.n),
            settings.delta,
            a,
            micro.p_regression is not None and micro.p_regression < a,
            float(lower),
        ),
        subjects=tuple(subjects),
        categories=categories,
    )
