"""Paired statistics between two runs over the same questions (no I/O, no policy).

Per question, x and y in {0,1} are the baseline's and candidate's correctness, d = y - x;
b = questions the candidate lost, c = questions it gained.
- Δ = mean(d) = (c - b)/n; SE = sd(d)/sqrt(n) (population sd), CI = Δ ± z·SE.
- Macro: Δ_M = mean over subjects of Δ_k, SE_M = sqrt(Σ var_k(d)/n_k)/K (subjects as strata).
- Exact one-sided McNemar: b | b+c ~ Binomial(b+c, 1/2) under no change (scipy's binomial tail,
  the value `scipy.stats.binomtest(b, b+c, alternative="greater")` gives).
- Across subjects: Holm (default) or Benjamini-Hochberg (`statsmodels` multipletests).
- Non-inferiority of the micro Δ against a margin δ: one-sided t-test of d against -δ.
- A subject-stratified paired bootstrap (`scipy.stats.bootstrap`, each subject resampled within
  itself) gives a second interval for micro and macro.

`python -m mmlu_track.compare` is the command line (see `gate.py`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from mmlu_track.results import QuestionResult
from mmlu_track.subjects import CATEGORIES, category


class ComparisonError(ValueError):
    """The two runs cannot be compared (different questions, settings, or unknown runs)."""


@dataclass(frozen=True)
class Delta:
    """Candidate minus baseline accuracy over one group of paired questions."""

    name: str
    n: int
    baseline_acc: float
    candidate_acc: float
    delta: float
    se: float
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
    margin: float
    lower_bound: float  # one-sided (1 - alpha) lower confidence bound of the micro Δ
    p_value: float
    shown: bool


@dataclass(frozen=True)
class Settings:
    alpha: float = 0.05
    margin: float = 0.01
    min_effect: float = 0.05
    correction: str = "holm"  # holm | fdr_bh
    bootstrap_resamples: int = 2000
    seed: int = 0


@dataclass(frozen=True)
class Comparison:
    settings: Settings
    micro: Delta
    macro: Delta
    bootstrap: dict[str, tuple[float, float]] | None  # micro/macro percentile intervals
    noninferiority: NonInferiority
    subjects: tuple[Delta, ...]
    categories: tuple[Delta, ...]


Pairs = dict[str, tuple[np.ndarray, np.ndarray]]


def pair(baseline: Sequence[QuestionResult], candidate: Sequence[QuestionResult]) -> Pairs:
    """Per subject, aligned correctness arrays (x, y); refuses runs over different questions."""
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
        xs.append(float(base[key].correct))
        ys.append(float(cand[key].correct))
    return {s: (np.array(x), np.array(y)) for s, (x, y) in out.items()}


def _mcnemar(b: int, c: int) -> tuple[float, float]:
    """One-sided exact p-values for a regression (b > c) and an improvement (c > b)."""
    if b + c == 0:
        return 1.0, 1.0
    # P(B >= b) for B ~ Binomial(b + c, 1/2): binomtest(b, b + c, alternative="greater"), without
    # its per-call overhead (the gate's simulations call this thousands of times).
    return float(stats.binom.sf(b - 1, b + c, 0.5)), float(stats.binom.sf(c - 1, b + c, 0.5))


def delta(name: str, x: np.ndarray, y: np.ndarray, z: float) -> Delta:
    d = y - x
    n = len(d)
    b, c = int(np.sum(d < 0)), int(np.sum(d > 0))
    se = float(np.std(d) / math.sqrt(n))  # = sqrt(b + c - (c - b)^2 / n) / n
    mean = float(np.mean(d))
    p_reg, p_imp = _mcnemar(b, c)
    return Delta(
        name, n, float(x.mean()), float(y.mean()), mean, se, mean - z * se, mean + z * se, b, c, p_reg, p_imp
    )


def _macro(pairs: Pairs, z: float) -> Delta:
    per = [delta(s, x, y, z) for s, (x, y) in pairs.items()]
    k = len(per)
    mean = sum(p.delta for p in per) / k
    se = math.sqrt(sum(p.se**2 for p in per)) / k  # se_k^2 = var_k(d) / n_k
    return Delta(
        "macro",
        sum(p.n for p in per),
        sum(p.baseline_acc for p in per) / k,
        sum(p.candidate_acc for p in per) / k,
        mean,
        se,
        mean - z * se,
        mean + z * se,
        sum(p.lost for p in per),
        sum(p.gained for p in per),
        None,
        None,
    )


def noninferiority(d: np.ndarray, margin: float, alpha: float) -> NonInferiority:
    """H0: Δ <= -margin against H1: Δ > -margin, by a one-sided one-sample t-test of d."""
    n = len(d)
    mean = float(np.mean(d))
    if np.all(d == d[0]):  # no variance: Δ is known exactly
        shown = mean > -margin
        return NonInferiority(margin, mean, 0.0 if shown else 1.0, shown)
    p = float(stats.ttest_1samp(d, popmean=-margin, alternative="greater").pvalue)
    lower = mean - float(stats.t.ppf(1 - alpha, n - 1)) * float(np.std(d, ddof=1)) / math.sqrt(n)
    return NonInferiority(margin, lower, p, p < alpha)


def _bootstrap(pairs: Pairs, settings: Settings) -> dict[str, tuple[float, float]]:
    samples = tuple(y - x for x, y in pairs.values())
    sizes = np.array([len(s) for s in samples])

    def macro(*ds: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(np.mean([np.mean(d, axis=axis) for d in ds], axis=0))

    def micro(*ds: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(np.sum([np.sum(d, axis=axis) for d in ds], axis=0) / sizes.sum())

    out = {}
    for name, statistic in (("micro", micro), ("macro", macro)):
        with warnings.catch_warnings():
            # Subjects where nothing changed are constant samples: harmless for percentile intervals.
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            res = stats.bootstrap(
                samples,
                statistic,
                n_resamples=settings.bootstrap_resamples,
                confidence_level=1 - settings.alpha,
                method="percentile",
                rng=np.random.default_rng(settings.seed),
            )
        out[name] = (float(res.confidence_interval.low), float(res.confidence_interval.high))
    return out


def compare(pairs: Pairs, settings: Settings) -> Comparison:
    """All paired statistics for two runs; subjects flagged per `settings` (see module docs)."""
    from statsmodels.stats.multitest import multipletests

    if not pairs:
        raise ComparisonError("no paired questions to compare")
    z = float(stats.norm.ppf(1 - settings.alpha / 2))
    subjects = [delta(s, x, y, z) for s, (x, y) in pairs.items()]
    p_reg = [s.p_regression or 1.0 for s in subjects]
    p_imp = [s.p_improvement or 1.0 for s in subjects]
    adj_reg = multipletests(p_reg, alpha=settings.alpha, method=settings.correction)[1]
    adj_imp = multipletests(p_imp, alpha=settings.alpha, method=settings.correction)[1]
    subjects = [
        Delta(
            **{
                **s.__dict__,
                "p_regression_adj": float(ar),
                "p_improvement_adj": float(ai),
                "flagged": bool(ar < settings.alpha and -s.delta >= settings.min_effect),
                "improved": bool(ai < settings.alpha and s.delta >= settings.min_effect),
            }
        )
        for s, ar, ai in zip(subjects, adj_reg, adj_imp, strict=True)
    ]
    x_all = np.concatenate([x for x, _ in pairs.values()])
    y_all = np.concatenate([y for _, y in pairs.values()])
    by_cat: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for s, (x, y) in pairs.items():
        xs, ys = by_cat.setdefault(category(s), ([], []))
        xs.append(x)
        ys.append(y)
    categories = tuple(
        delta(c, np.concatenate(by_cat[c][0]), np.concatenate(by_cat[c][1]), z)
        for c in CATEGORIES
        if c in by_cat
    )
    return Comparison(
        settings=settings,
        micro=delta("micro", x_all, y_all, z),
        macro=_macro(pairs, z),
        bootstrap=_bootstrap(pairs, settings) if settings.bootstrap_resamples > 0 else None,
        noninferiority=noninferiority(y_all - x_all, settings.margin, settings.alpha),
        subjects=tuple(subjects),
        categories=categories,
    )


def by_name(deltas: Sequence[Delta]) -> Mapping[str, Delta]:
    return {d.name: d for d in deltas}


if __name__ == "__main__":
    from mmlu_track.gate import main

    main()
