"""The release policy: a comparison's verdict and exit code, and when two runs are comparable.

- `decide`: regression when a drop is shown (exact McNemar on all questions, or a flagged subject
  under a policy that fails on them); pass when non-inferiority at δ is shown and no drop is;
  inconclusive when neither is (the data cannot tell; it still fails unless the policy warns only).
- `incomparable`: the one definition of "comparable" (the gate's check and model-name lookup).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mmlu_track.gate.questions import clean_problems
from mmlu_track.gate.stats import Comparison, ComparisonError, pts
from mmlu_track.records.results import QuestionResult
from mmlu_track.records.stored import RunStatus
from mmlu_track.settings.config import CompareConfig, CompareMode, GateConfig, is_served
from mmlu_track.support.errors import EXIT_PASS, EXIT_REGRESSION

if TYPE_CHECKING:
    from mmlu_track.records.stored import NoiseEntry, StoredRun
    from mmlu_track.store.sql import SqlStore


@dataclass(frozen=True)
class Verdict:
    """What the gate decided and why. `headline` is the report's first line."""

    status: str  # pass | regression | inconclusive | analysis
    headline: str
    reasons: tuple[str, ...]
    exit_code: int


def decide(comp: Comparison, gate: GateConfig) -> Verdict:
    """Apply a policy to a comparison (see `GateConfig`).

    regression: a drop is shown (exact McNemar on all questions, or a flagged subject under a policy
    that fails on them). pass: non-inferiority at δ is shown and no drop is. inconclusive: neither
    is shown; the data cannot tell, and the gate still fails unless the policy only warns.
    """
    ni, micro, a = comp.noninferiority, comp.micro, gate.alpha
    delta_txt = f"δ = {100 * gate.delta:.1f} pts"
    ni_line = (
        f"non-inferiority at {delta_txt} {'shown' if ni.shown else 'not shown'}: one-sided "
        f"{100 * (1 - a):.0f}% lower bound of Δ micro {pts(ni.lower_bound)} pts (p = {ni.p_value:.3g}), "
        f"{micro.lost} lost and {micro.gained} gained of {micro.n} questions"
    )
    drops = []
    if micro.p_regression is not None and micro.p_regression < a:
        drops.append(
            f"significant overall drop: Δ micro {pts(micro.delta)} pts, {micro.lost} lost vs {micro.gained} "
            f"gained (exact McNemar p = {micro.p_regression:.3g})"
        )
    if flagged := flagged_drop(comp, gate):
        drops.append(flagged)
    fail = EXIT_PASS if gate.warn_only else EXIT_REGRESSION
    if drops:
        return Verdict("regression", drops[0], (*drops, ni_line), fail)
    if ni.shown:
        return Verdict("pass", f"non-inferiority shown at {delta_txt}, no drop shown", (ni_line,), EXIT_PASS)
    need = (
        f"{ni.questions_needed:,} questions are needed for two runs that differ by nothing but the observed "
        f"{100 * ni.discordance:.1f}% of changed answers to pass 80% of the time"
        if ni.questions_needed is not None
        else "a margin of 0 cannot be shown"
    )
    headline = f"too few questions to tell: neither non-inferiority at {delta_txt} nor a drop is shown"
    return Verdict("inconclusive", headline, (ni_line, need), fail)


def flagged_drop(comp: Comparison, gate: GateConfig) -> str | None:
    """The regression a policy that fails on flagged subjects sees (`gate.fail_on_flagged_subjects`):
    the subjects whose own drop is significant after the multiplicity correction; None if none."""
    flagged = [s.name for s in comp.subjects if s.flagged]
    if not (flagged and gate.fail_on_flagged_subjects):
        return None
    return f"{len(flagged)} subject(s) regressed significantly: {', '.join(flagged)}"


def analysis(comp: Comparison) -> Verdict:
    """The verdict of a few-shot gap (`mode=fewshot_gap`): no pass or fail, status `analysis`, exit 0;
    its headline is Δ micro with its interval and how many subjects gain and lose significantly."""
    m = comp.micro
    headline = (
        f"few-shot gap Δ micro {pts(m.delta)} pts [{pts(m.ci_low)} pts, {pts(m.ci_high)} pts], "
        f"{sum(s.improved for s in comp.subjects)} subject(s) gain and "
        f"{sum(s.flagged for s in comp.subjects)} lose significantly"
    )
    return Verdict("analysis", headline, (), EXIT_PASS)


def incomparable(base: StoredRun, cand: StoredRun, mode: CompareMode, metric: str = "accuracy") -> list[str]:
    """Why two runs cannot be compared in `mode` on `metric` (empty: they can):
    `records.run.EvalProtocol`'s one definition (the same questions, prompts and scoring), for
    `fewshot_gap` the same model, and on `circular` both asked in every rotation. The gate checks it,
    and a model name resolves to its newest run passing it."""
    gap = mode == "fewshot_gap"
    out = base.protocol.differences(cand.protocol, fewshot_gap=gap)
    if metric == "circular":
        out += [
            f"choice order differs: gate.metric=circular needs both runs asked in every rotation, and the "
            f"{side} run {run.id[:12]} was asked as given (run it with scoring.choice_order=circular, or "
            "gate on gate.metric=accuracy)"
            for run, side in ((base, "baseline"), (cand, "candidate"))
            if run.protocol.choice_order != "circular"
        ]
    if not gap and base.k != cand.k:
        out = [f"{o}; to measure the few-shot gap between them, add mode=fewshot_gap" if o.startswith("k ")
               else o for o in out]  # fmt: skip
    out += _engines(base, cand)
    if gap:
        models = (base.model_name, base.model_revision), (cand.model_name, cand.model_revision)
        if models[0] != models[1]:
            out.append(f"model differs (baseline {models[0]}, candidate {models[1]})")
        if base.k == cand.k:
            out.append(f"mode=fewshot_gap needs two different k, both runs have k={base.k}")
    return out


def _engine(run: StoredRun) -> str:
    source = run.config.model.source
    return f"served (model.source={source})" if is_served(source) else "in-process"


def _engines(base: StoredRun, cand: StoredRun) -> list[str]:
    """A served and an in-process run differ in the weights' numerics and in more than the model (a
    server computes with its own kernels and quantization): compared only as the same weights,
    which the user declares by giving the served run the other's recorded revision."""
    eb, ec = _engine(base), _engine(cand)
    if eb == ec or (base.model_revision is not None and base.model_revision == cand.model_revision):
        return []
    local = base if eb == "in-process" else cand
    return [
        f"scoring engine differs (baseline {eb}, candidate {ec}): served and in-process runs are "
        f"compared only as the same weights, declared by equal revisions (baseline {base.model_revision}, "
        f"candidate {cand.model_revision}); if they are, evaluate the served one with "
        f"model.revision={local.model_revision}"
    ]


def metric_note(base: StoredRun, cand: StoredRun, metric: str) -> list[str]:
    """What the verdict rests on, where that is not plain accuracy, or where a run was circular:
    circular accuracy, and each circular run's consistency (the same text chosen in every rotation)."""

    def consistency(run: StoredRun) -> str | None:
        record = run.record
        if record is None or record.circular is None:
            return None
        return f"{100 * record.circular.consistency.micro.acc:.1f} %"

    shown = [(side, c) for side, run in (("baseline", base), ("candidate", cand)) if (c := consistency(run))]
    if metric != "circular" and not shown:
        return []
    what = (
        "circular accuracy (a question counts as correct only if it is in every rotation of its choices)"
        if metric == "circular"
        else "accuracy as given (gate.metric=circular would gate on the rotations)"
    )
    same = ", ".join(f"{side} {c}" for side, c in shown)
    return [f"the verdict rests on {what}" + (f"; consistency: {same}" if same else "")]


def unrecorded(base: StoredRun, cand: StoredRun) -> list[str]:
    """Notes on what could not be compared: settings a run predates."""
    out = []
    for run, side in ((base, "baseline"), (cand, "candidate")):
        if missing := run.protocol.unrecorded():
            out.append(f"the {side} run {run.id[:12]} has no record of {', '.join(missing)}: not compared")
    return out


def same_prompts(base: Sequence[QuestionResult], cand: Sequence[QuestionResult]) -> None:
    """Refuse a gate between runs that asked some question with different prompts (the settings
    agree, yet e.g. shots were dropped to fit one model's shorter context)."""
    theirs = {(r.subject, r.index): r for r in cand}
    pairs = [(r, theirs[(r.subject, r.index)]) for r in base if (r.subject, r.index) in theirs]
    if differ := [(b, c) for b, c in pairs if b.prompt_hash != c.prompt_hash]:
        b, c = differ[0]
        dropped = any(x.shots_used != y.shots_used for x, y in differ)
        hint = (
            "; shots were dropped to fit a shorter context: give both the same max_length" if dropped else ""
        )
        raise ComparisonError(
            f"runs are not comparable: {len(differ)} of {len(pairs)} questions were asked with different "
            f"prompts (e.g. {b.subject} question {b.index}: baseline {b.shots_used} shots, candidate "
            f"{c.shots_used}){hint}"
        )


def require_finished(run: StoredRun, side: str, store: SqlStore) -> StoredRun:
    """The run, if finished; else one line saying what it is and what to do."""
    if run.status == RunStatus.FINISHED:
        return run
    if stopped := run.early_stop:  # the sequential gate's: it holds part of the questions
        why = f" ({stopped.summary()}; its own command without gate.sequential resumes it)"
    elif dead := store.dead(run):
        why = f": it is dead ({dead}); rerun its command to resume it"
    elif run.status == RunStatus.FAILED:
        why = ": rerun its command to resume it"
    else:
        why = ": wait for it to finish"
    raise ComparisonError(f"the {side} run {run.id} is {run.status}, not finished{why}")


def check_comparable(base: StoredRun, cand: StoredRun, cfg: CompareConfig, store: SqlStore) -> None:
    """Refuse unfinished runs and pairs whose differences are not the thing being compared."""
    for run, side in ((base, "baseline"), (cand, "candidate")):
        require_finished(run, side, store)
    problems = incomparable(base, cand, cfg.mode, cfg.gate.metric)
    if cfg.gate.questions == "clean":
        problems += clean_problems(base, cand)
    if problems:
        raise ComparisonError(f"runs are not comparable: {problems[0]}")


def noise_notes(noise: NoiseEntry | None, comp: Comparison, g: GateConfig, status: str) -> list[str]:
    """What the evaluation's own noise, when measured for this prompt protocol, says of this verdict:
    the floor at this comparison's n beside it (naming the measurement), this comparison's own flip
    rate beside the noise's, and a warning when gate.margin is below the floor, when this many
    questions cannot show it at the measured flip rate, or when the measurement did not cover every
    subject compared. A warning says what it means for the verdict `status` (pass, regression,
    inconclusive): a margin below the floor can only make a verdict stricter than noise allows, so a
    PASS stands and a FAIL or INCONCLUSIVE may be noise alone."""
    if noise is None:
        return []
    from mmlu_track.stats.decision import questions_needed

    n, upper = comp.micro.n, noise.flip_upper
    floor = noise.margin_at(n, g.alpha)
    spread = (
        f"; shot-seed range {100 * noise.shot_seed_range:.1f} pts"
        if noise.shot_seed_range is not None
        else ""
    )
    changed = (comp.micro.lost + comp.micro.gained) / n
    out = [
        f"this evaluation's own noise (measurement {noise.id[:12]} of {noise.created_at:%Y-%m-%d}, "
        f"reference run {noise.reference_run_id[:12]}, n = {noise.n:,}): {100 * noise.flip_rate:.1f} % of "
        f"answers flip (at most {100 * upper:.1f} % at 95 % confidence); at this comparison's n = {n:,} a "
        f"noise-only pair passes 95 % of the time from δ = {100 * floor:.2f} pts{spread}",
        f"{100 * changed:.1f} % of answers changed between these runs; noise alone flips at most "
        f"{100 * upper:.1f} %",
    ]
    measured = noise.subjects
    if measured is not None and (outside := sorted({s.name for s in comp.subjects} - set(measured))):
        out.append(
            f"warning: the noise measurement did not cover {len(outside)} of the {len(comp.subjects)} "
            f"subjects compared (e.g. {outside[0]}): its flip rate is assumed to hold for them"
        )
    if g.delta < floor:
        meaning = (
            "this PASS stands (a margin below the floor makes noise alone likelier to fail, never to pass)"
            if status == "pass"
            else f"this {status.upper()} may be noise alone: gate.margin=auto gates at the floor"
        )
        out.append(
            f"warning: gate.margin = {100 * g.delta:.2f} pts is below this evaluation's noise floor "
            f"({100 * floor:.2f} pts at n = {n:,}): two runs differing only by noise may fail it; {meaning}"
        )
    elif g.delta > 0 and (needed := questions_needed(upper, g.delta, g.alpha)) > n:
        out.append(
            f"warning: at up to {100 * upper:.1f} % flips, a noise-only pair passes "
            f"δ = {100 * g.delta:.2f} pts 80 % of the time from {needed:,} questions; "
            f"this comparison has {n:,}"
        )
    return out


def auto_margin(g: GateConfig, noise: NoiseEntry | None, protocol_of: str, n: int) -> GateConfig:
    """`gate.margin=auto`: δ is the floor of the stored noise measurement of this prompt protocol
    at this comparison's n questions (`NoiseEntry.margin_at`)."""
    if g.margin != "auto":
        return g
    if noise is None:
        raise ComparisonError(
            f"gate.margin=auto needs a noise measurement of these runs' protocol and there is none (the "
            f"runs of {protocol_of}): measure it with python -m mmlu_track.noise and the same settings, or "
            "give a number"
        )
    return replace(g, margin=noise.margin_at(n, g.alpha))
