"""The sequential gate end to end: evaluate the candidate in looks, paired with a stored baseline,
and stop as soon as the verdict is clear (the statistics: `sequential.py`).

    python -m mmlu_track model=... gate.baseline=RUN gate.sequential=true [gate.looks=20]

The candidate's questions are scored in `gate.looks` looks (`plan.looks`: each subject's questions
in a seeded order, a part of every subject per look). After each committed look the betting tests
decide: pass (non-inferiority at δ shown), regression (a drop shown), or go on. A decision before
the last look stops the evaluation: the run is recorded `stopped` (never a full baseline), and the
same command without gate.sequential resumes it to completion. A decision at the last look, or
none, leaves a finished run. The report (console, report.md, the job summary, report.json, the
comparison's MLflow run) says at which look it stopped, the questions used and saved, and the
anytime-valid interval there; its tables are the fixed-sample statistics of the questions used,
descriptive only.

Exit codes as the compare command's: 0 pass, 1 regression or inconclusive, 2 unusable input, 70 a bug.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.gate.outcome import DocsFor, Outcome, questions_text
from mmlu_track.gate.policy import (
    Verdict,
    flagged_drop,
    incomparable,
    metric_note,
    noise_notes,
    require_finished,
    same_prompts,
)
from mmlu_track.gate.publish import publish
from mmlu_track.gate.run import Lookup, resolve
from mmlu_track.gate.stats import Comparison, ComparisonError, compare, origins, pair, pts
from mmlu_track.records.results import QuestionResult
from mmlu_track.records.run import EarlyStop
from mmlu_track.records.stored import RecordedVerdict, RunStatus
from mmlu_track.settings.config import CompareConfig, EvalConfig, GateConfig
from mmlu_track.stats.sequential import LookCounts, SequentialResult, decide_looks, look_sizes
from mmlu_track.store.sql import open_existing_store
from mmlu_track.support.errors import EXIT_PASS, EXIT_REGRESSION

if TYPE_CHECKING:
    from mmlu_track.records.stored import StoredRun
    from mmlu_track.store.sql import SqlStore


@contextlib.contextmanager
def sequential_gate(
    cfg: EvalConfig, echo: Callable[[str], None] = print, docs_for: DocsFor | None = None
) -> Iterator[SequentialLooks]:
    """The sequential gate of the evaluation `cfg` (gate.sequential=true), over its store: pass it
    to the evaluation as its `looks`, then `conclude` with the run the evaluation recorded.
    `docs_for`: the questions' text for MLflow's per-question table (`gate.run.execute`)."""
    store = open_existing_store(cfg.tracking)
    try:
        yield SequentialLooks(store, cfg, echo, docs_for)
    finally:
        store.close()


class SequentialLooks:
    """The pipeline's `Looks`: observes each committed look, pairs it with the baseline, decides."""

    def __init__(
        self,
        store: SqlStore,
        cfg: EvalConfig,
        echo: Callable[[str], None] = print,
        docs_for: DocsFor | None = None,
    ) -> None:
        """The gate over `store` for the evaluation `cfg` (`echo`: a line per look; `docs_for`: the
        questions' text); `ComparisonError` before the model loads when there is no gate, or its
        baseline names no finished run."""
        self.echo, self.docs_for = echo, docs_for  # a line per look; the questions' text
        if cfg.gate is None:
            raise ComparisonError("the sequential gate needs gate.sequential=true gate.baseline=RUN")
        gate = cfg.gate
        self.cfg, self.store, self.gate, self.count = cfg, store, gate, gate.looks
        self.uri = cfg.tracking.mlflow_uri
        self.reference = _baseline(gate)
        # Fail before the model loads when the reference names nothing.
        self.how = Lookup("gate", self.uri, gate.metric)
        found = resolve(store, self.reference, None, self.how)
        self.base = require_finished(found, "baseline", store)
        self.candidate: StoredRun | None = None
        self.baseline: dict[tuple[str, int], QuestionResult] = {}
        self.counts: list[LookCounts] = []
        self.used: list[QuestionResult] = []
        self.result: SequentialResult | None = None
        self.kept: RecordedVerdict | None = None  # the verdict a re-run of the command takes back

    def begin(self, cand: StoredRun) -> None:
        """Pick the baseline comparable with the candidate (a model name: its newest such run), and
        refuse to resume a run of this identity under other gate settings."""
        found = resolve(self.store, self.reference, (cand, "candidate"), self.how)
        self.base = require_finished(found, "baseline", self.store)
        if problems := incomparable(self.base, cand, "gate", self.gate.metric):
            raise ComparisonError(f"runs are not comparable: {problems[0]}")
        if (earlier := self.store.unfinished(cand.identity)) is not None:
            self._same_settings(earlier)
        self.candidate = cand
        self.baseline = {(r.subject, r.index): r for r in self.store.question_results(self.base.id)}
        if len(self.baseline) != cand.n_questions:  # the same fingerprint, yet rows are missing
            raise ComparisonError(
                f"the baseline run {self.base.id} holds {len(self.baseline)} of its {cand.n_questions} "
                "questions in the store: it cannot be paired question by question"
            )
        if not _can_pass(cand.n_questions, self.count, self.gate):
            self.echo(
                f"the sequential gate cannot show non-inferiority at δ = {100 * self.gate.delta:.1f} pts on "
                f"{cand.n_questions:,} questions even if no answer changes: it will end undecided unless a "
                "drop is shown (raise limit, or gate.margin)"
            )

    def recorded(self, candidate: StoredRun) -> bool:
        """True, keeping it for `conclude`, when the gate's verdict on `candidate` is recorded, the
        run was gated with these settings, and the baseline it took is the one the reference names
        now (a model name with a newer comparable run: scored and gated again)."""
        found = self.store.comparisons.latest(candidate.id, "sequential")
        was = candidate.config.gate
        if found is None or was is None or not was.sequential:
            return False
        if _fixed(was) != _fixed(self.gate):
            return False
        try:
            now = resolve(self.store, self.reference, (candidate, "candidate"), self.how)
        except ComparisonError:
            return False  # the scoring path says why, as before
        if now.id != found.baseline_run_id:
            self.echo(
                f"run {candidate.id[:12]} was gated against {found.baseline_run_id[:12]}; "
                f"{self.reference} now names {now.id[:12]}: scoring and gating again"
            )
            return False
        self.kept = found
        return True

    def _same_settings(self, earlier: StoredRun) -> None:
        """δ, α, the looks and the baseline are fixed for the life of a run: choosing them after
        seeing its committed questions would void the error guarantees."""
        if not (committed := self.store.n_committed(earlier.id)):
            return
        was, g = earlier.config.gate, self.gate
        if was is None or not was.sequential:
            why = "without the sequential gate"
        elif _fixed(was) != _fixed(g):
            why = (
                f"with gate.margin={was.margin} gate.alpha={was.alpha} gate.looks={was.looks} "
                f"gate.baseline={was.baseline}"
            )
        elif (stop := earlier.early_stop) is not None and stop.baseline_run_id != self.base.id:
            why = (
                f"against the baseline {stop.baseline_run_id[:12]} ({g.baseline} is now {self.base.id[:12]})"
            )
        else:
            return
        raise ComparisonError(
            f"run {earlier.id[:12]} with these settings was started {why} and has {committed} questions "
            "committed: a sequential gate's settings are fixed for the life of its run; resume it with "
            "those, or start a separate run with tracking.resume=false"
        )

    def look(self, number: int, results: Sequence[QuestionResult]) -> EarlyStop | None:
        """Pair look `number`'s committed questions with the baseline and decide: an `EarlyStop` when a
        verdict is reached before the last look, else None (go on; after the last look the run finishes).
        `ComparisonError` when the baseline was deleted, or asked a question with other prompts."""
        if self.store.get(self.base.id) is None:
            raise ComparisonError(
                f"the baseline run {self.base.id[:12]} was deleted from the store during the evaluation "
                f"(before look {number} of {self.count}); the candidate's committed questions are kept: "
                "gate them against another baseline with tracking.resume=false"
            )
        same_prompts([self.baseline[(r.subject, r.index)] for r in results], results)
        lost = gained = 0
        for r in results:
            # Equal fingerprints: the same questions.
            before, now = (
                self.baseline[(r.subject, r.index)].outcome(self.gate.metric),
                r.outcome(self.gate.metric),
            )
            lost += before and not now
            gained += now and not before
        self.counts.append(LookCounts(len(results), lost, gained))
        self.used.extend(results)
        self.result = decide_looks(self.counts, self.gate.delta, self.gate.alpha)
        res = self.result
        state = (
            res.decision
            if res.decision != "continue" or number < self.count
            else "no decision: the run is over"
        )
        self.echo(
            f"look {number}/{self.count}: {res.n:,} questions, {res.lost} lost, {res.gained} gained, "
            f"Δ {pts(res.delta)} pts, anytime-valid interval [{pts(res.lower)}, {pts(res.upper)}] pts: "
            f"{state}"
        )
        if self.result.decision == "continue" or number == self.count:
            return None  # at the last look every question is scored: the run finishes
        if self.candidate is None:
            raise RuntimeError("a look was decided before `begin` (a bug: the pipeline begins first)")
        return EarlyStop(
            look=number,
            looks=self.count,
            questions_scored=self.result.n,
            questions_total=self.candidate.n_questions,
            verdict=self.result.decision,
            reason=headline(self.result, self.gate, self.count),
            baseline_run_id=self.base.id,
        )

    def conclude(self, run_id: str | None, output_dir: Path, echo: Any = print) -> int:
        """The evaluation recorded `run_id` in looks: report the verdict; its exit code."""
        gate, store = self.gate, self.store
        if (kept := self.kept) is not None:  # the same command again: its recorded verdict, nothing new
            self.echo(
                f"the sequential gate's recorded verdict ({kept.status}, comparison "
                f"{kept.comparison_id[:12]} against run {kept.baseline_run_id[:12]}): {kept.headline} "
                f"(exit {kept.exit_code})"
            )
            return kept.exit_code
        if run_id is None or self.result is None:
            raise RuntimeError("the gated evaluation scored no look (a bug: an unsharded run has units)")
        cand = store.get(run_id)
        if cand is None:
            raise ComparisonError(f"the candidate run {run_id[:12]} was deleted from the store while gated")
        res, base = self.result, self.base
        if store.get(base.id) is None:
            raise ComparisonError(
                f"the baseline run {base.id[:12]} was deleted from the store during the evaluation; the "
                f"candidate run {cand.id[:12]} is kept ({cand.status}): compare it with another baseline"
            )
        base_used = [self.baseline[(r.subject, r.index)] for r in self.used]
        groups = origins(base_used, self.used, gate.metric)
        comp = compare(pair(base_used, self.used, gate.metric), gate, groups=groups)
        verdict = _verdict(res, gate, self.count, cand.n_questions)
        verdict = _say_needed(verdict, comp, cand.n_questions, self.cfg.limit is not None)
        if (drop := flagged_drop(comp, gate)) and verdict.status != "regression":
            verdict = replace(
                verdict,
                status="regression",
                headline=drop,
                exit_code=EXIT_REGRESSION,
                reasons=(drop, *verdict.reasons),
            )
        notes = metric_note(base, cand, gate.metric) + noise_notes(
            store.noise.latest(cand.protocol), comp, gate, verdict.status
        )
        if notes:
            verdict = replace(verdict, reasons=(*verdict.reasons, *notes))
        compare_cfg = CompareConfig(base.id, cand.id, gate, self.cfg.tracking, "gate")
        outcome = Outcome(
            comp,
            verdict,
            base,
            cand,
            compare_cfg,
            extra=_extra(res, self.count, cand),
            results=(base_used, self.used),
            docs=questions_text(self.docs_for, base, self.cfg.tracking.mlflow),  # a stopped run has no record
        )
        publish(store, outcome, output_dir / "gate", echo)
        return verdict.exit_code


def _fixed(gate: GateConfig) -> tuple[object, ...]:
    """What a sequential gate fixes for the life of its run: δ, α, the looks, the baseline."""
    return gate.margin, gate.alpha, gate.looks, gate.baseline


def _baseline(gate: GateConfig) -> str:
    if gate.baseline is None:
        raise ComparisonError("the sequential gate needs gate.baseline=RUN: the stored run to gate against")
    return gate.baseline


def _can_pass(n: int, looks: int, gate: GateConfig) -> bool:
    """Whether a candidate answering every question as the baseline did would pass by the last look."""
    counts = [LookCounts(size, 0, 0) for size in look_sizes(n, looks) if size]
    return bool(counts) and decide_looks(counts, gate.delta, gate.alpha).decision == "pass"


def headline(res: SequentialResult, gate: GateConfig, looks: int) -> str:
    """The sequential verdict in one line: pass or regression at its look of `looks`, or neither after
    them all, with the anytime-valid interval of Δ micro in points."""
    delta = f"δ = {100 * gate.delta:.1f} pts"
    ci = f"anytime-valid interval [{pts(res.lower)}, {pts(res.upper)}] pts"  # the verdict's own
    if res.decision == "pass":
        return f"non-inferiority shown at {delta} at look {res.look} of {looks} ({ci}), no drop shown"
    if res.decision == "regression":
        return f"a drop shown at look {res.look} of {looks}: Δ micro {pts(res.delta)} pts ({ci})"
    return f"neither non-inferiority at {delta} nor a drop shown after all {looks} looks ({ci})"


def _verdict(res: SequentialResult, gate: GateConfig, looks: int, total: int) -> Verdict:
    status = {"pass": "pass", "regression": "regression", "continue": "inconclusive"}[res.decision]
    saved = total - res.n
    level = 100 * (1 - 2 * gate.alpha)
    when = (
        f"decided at look {res.look} of {looks} on {res.n:,} of {total:,} questions "
        f"({100 * res.n / total:.0f} %), {saved:,} questions saved"
        if res.decision != "continue"
        else f"no decision after all {looks} looks ({res.n:,} questions)"
    )
    reasons = (
        f"sequential gate: {when}; {res.lost} lost and {res.gained} gained",
        f"anytime-valid {level:.0f}% interval of Δ micro [{pts(res.lower)} pts, {pts(res.upper)} pts] "
        f"(each bound {100 * (1 - gate.alpha):.0f}% at every look; betting confidence sequence)",
        f"the tables below are fixed-sample statistics of the {res.n:,} questions used: descriptive only, "
        "the verdict is the sequential test's",
    )
    code = EXIT_PASS if status == "pass" else EXIT_REGRESSION
    return Verdict(status, headline(res, gate, looks), reasons, code)


def _say_needed(verdict: Verdict, comp: Comparison, total: int, limited: bool) -> Verdict:
    """An INCONCLUSIVE says how many questions it would have needed: the fixed-sample figure at the
    changed answers seen (`stats.decision.questions_needed`, said to be the fixed-sample gate's); a
    sequential gate, paying for its early looks, needs somewhat more."""
    ni = comp.noninferiority
    if verdict.status != "inconclusive" or ni.questions_needed is None:
        return verdict
    n = ni.questions_needed
    fix = "raise limit" if limited else "only a wider gate.margin can be shown on these questions"
    more = f"more than this run's {total:,}: {fix}" if n > total else f"this run has {total:,}"
    needed = (
        f"a fixed-sample gate passes two runs that differ by nothing but the observed "
        f"{100 * ni.discordance:.1f}% of changed answers 80% of the time from {n:,} questions (a "
        f"sequential one, paying for its looks, needs somewhat more): {more}"
    )
    return replace(verdict, reasons=(*verdict.reasons, needed))


def _extra(res: SequentialResult, looks: int, cand: StoredRun) -> tuple[dict[str, Any], dict[str, float]]:
    """The sequential test's own section of report.json and its MLflow metrics."""
    section = {
        "sequential": {
            "look": res.look,
            "looks": looks,
            "questions_used": res.n,
            "questions_total": cand.n_questions,
            "questions_saved": cand.n_questions - res.n,
            # After the last look "continue" is final: the run is over, undecided.
            "decision": "undecided" if res.decision == "continue" else res.decision,
            "lower": res.lower,
            "upper": res.upper,
            "lost": res.lost,
            "gained": res.gained,
            "stopped_early": cand.status == RunStatus.STOPPED,
            "log_wealth_pass": res.log_wealth_pass,
            "log_wealth_regression": res.log_wealth_regression,
            "method": "betting (Waudby-Smith & Ramdas 2024): Kelly bets one margin past the null",
        }
    }
    metrics = {
        "sequential/look": float(res.look),
        "sequential/questions_used": float(res.n),
        "sequential/questions_saved": float(cand.n_questions - res.n),
        "sequential/ci_low_pts": 100 * res.lower,  # in points, as every other interval metric
        "sequential/ci_high_pts": 100 * res.upper,
    }
    return section, metrics
