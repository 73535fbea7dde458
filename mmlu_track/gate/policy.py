"""The release policy: a comparison's verdict and exit code, and when two runs are comparable.

- `decide`: regression when a drop is shown (exact McNemar on all questions, or a flagged subject
  under a policy that fails on them); pass when non-inferiority at δ is shown and no drop is;
  inconclusive when neither is (the data cannot tell; it still fails unless the policy warns only).
- `differences`: the one definition of "comparable" (the gate's check and model-name lookup).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mmlu_track.config import CompareMode, GateConfig
from mmlu_track.gate.stats import Comparison, ComparisonError
from mmlu_track.store.sql import config_of, early_stop_of

if TYPE_CHECKING:
    from mmlu_track.store.orm import Run

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2


@dataclass(frozen=True)
class Verdict:
    """What the gate decided and why. `headline` is the report's first line."""

    status: str  # pass | regression | inconclusive | analysis
    headline: str
    reasons: tuple[str, ...]
    exit_code: int


def _pts(x: float) -> str:
    return f"{100 * x:+.2f} pts"


def decide(comp: Comparison, gate: GateConfig) -> Verdict:
    """Apply a policy to a comparison (see `GateConfig`).

    regression: a drop is shown (exact McNemar on all questions, or a flagged subject under a policy
    that fails on them). pass: non-inferiority at δ is shown and no drop is. inconclusive: neither
    is shown; the data cannot tell, and the gate still fails unless the policy only warns.
    """
    ni, micro, a = comp.noninferiority, comp.micro, gate.alpha
    delta_txt = f"δ = {100 * gate.margin:.1f} pts"
    ni_line = (
        f"non-inferiority at {delta_txt} {'shown' if ni.shown else 'not shown'}: one-sided "
        f"{100 * (1 - a):.0f}% lower bound of Δ micro {_pts(ni.lower_bound)} (p = {ni.p_value:.3g}), "
        f"{micro.lost} lost and {micro.gained} gained of {micro.n} questions"
    )
    drops = []
    if micro.p_regression is not None and micro.p_regression < a:
        drops.append(
            f"significant overall drop: Δ micro {_pts(micro.delta)}, {micro.lost} lost vs {micro.gained} "
            f"gained (exact McNemar p = {micro.p_regression:.3g})"
        )
    flagged = [s.name for s in comp.subjects if s.flagged]
    if flagged and gate.fail_on_flagged_subjects:
        drops.append(f"{len(flagged)} subject(s) regressed significantly: {', '.join(flagged)}")
    fail = EXIT_PASS if gate.warn_only else EXIT_REGRESSION
    if drops:
        return Verdict("regression", drops[0], (*drops, ni_line), fail)
    if ni.shown:
        return Verdict("pass", f"non-inferiority shown at {delta_txt}, no drop shown", (ni_line,), EXIT_PASS)
    need = (
        f"about {ni.questions_needed:,} questions would be needed at the observed "
        f"{100 * ni.discordance:.1f}% of changed answers (80% power if nothing changed)"
        if ni.questions_needed is not None
        else "a margin of 0 cannot be shown"
    )
    headline = f"too few questions to tell: neither non-inferiority at {delta_txt} nor a drop is shown"
    return Verdict("inconclusive", headline, (ni_line, need), fail)


def analysis(comp: Comparison) -> Verdict:
    m = comp.micro
    headline = (
        f"few-shot gap Δ micro {_pts(m.delta)} [{_pts(m.ci_low)}, {_pts(m.ci_high)}], "
        f"{sum(s.improved for s in comp.subjects)} subject(s) gain and "
        f"{sum(s.flagged for s in comp.subjects)} lose significantly"
    )
    return Verdict("analysis", headline, (), EXIT_PASS)


def _scoring_key(run: Run) -> tuple[str, str]:
    scoring = config_of(run).scoring
    return scoring.method, scoring.calibration


def differences(base: Run, cand: Run, mode: CompareMode) -> list[str]:
    """Why two runs cannot be compared in `mode` (empty: they can). The one definition of
    "comparable": the gate checks it, and a model name resolves to its newest run passing it."""
    checks: list[tuple[str, object, object]] = [
        ("questions (data fingerprint)", base.data_fingerprint, cand.data_fingerprint),
        ("formulation", base.formulation, cand.formulation),
        ("scoring (method, calibration)", _scoring_key(base), _scoring_key(cand)),
    ]
    if mode == "gate":
        checks.append(("k", base.k, cand.k))
    else:  # fewshot_gap: the same model and questions, only k differs
        checks.append(
            ("model", (base.model_name, base.model_revision), (cand.model_name, cand.model_revision))
        )
    out = [f"{what} differs (baseline {b}, candidate {c})" for what, b, c in checks if b != c]
    if mode == "gate" and base.k != cand.k:
        out = [
            f"{o}; to measure the few-shot gap between them, add mode=fewshot_gap"
            if o.startswith("k ")
            else o
            for o in out
        ]
    if mode == "fewshot_gap" and base.k == cand.k:
        out.append(f"mode=fewshot_gap needs two different k, both runs have k={base.k}")
    return out


def require_finished(run: Run, side: str) -> Run:
    """The run, if finished: a stopped one (the sequential gate's) holds part of the questions."""
    if run.status != "finished":
        stopped = early_stop_of(run)
        why = f" ({stopped.summary()}; its own command without gate.sequential resumes it)" if stopped else ""
        raise ComparisonError(f"the {side} run {run.id} is {run.status}, not finished{why}")
    return run


def check_comparable(base: Run, cand: Run, mode: CompareMode) -> None:
    """Refuse unfinished runs and pairs whose differences are not the thing being compared."""
    for run, side in ((base, "baseline"), (cand, "candidate")):
        require_finished(run, side)
    if problems := differences(base, cand, mode):
        raise ComparisonError(f"runs are not comparable: {problems[0]}")
