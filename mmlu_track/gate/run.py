"""The release gate: resolve two stored runs, compare them, decide, report, record; exit codes.

    python -m mmlu_track.compare baseline=RUN candidate=RUN [gate=strict|warn_only] [mode=fewshot_gap]

Exit codes: 0 pass (or warn-only, or an analysis), 1 regression or inconclusive, 2 unusable input
(Hydra's own usage errors included: `main` turns its exit 1 into 2), 70 a bug.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from mmlu_track.gate.outcome import DocsFor, Outcome, questions_text
from mmlu_track.gate.policy import (
    analysis,
    auto_margin,
    check_comparable,
    decide,
    incomparable,
    metric_note,
    noise_notes,
    same_prompts,
    unrecorded,
)
from mmlu_track.gate.publish import publish
from mmlu_track.gate.questions import disputed, only_clean
from mmlu_track.gate.stats import ComparisonError, compare, origins, pair
from mmlu_track.records.results import QuestionResult
from mmlu_track.records.stored import ambiguous
from mmlu_track.settings.config import CompareConfig, CompareMode, GateConfig
from mmlu_track.store.sql import open_existing_store

if TYPE_CHECKING:
    from mmlu_track.records.stored import StoredRun
    from mmlu_track.store.sql import SqlStore


def _by_id(store: SqlStore, ref: str) -> StoredRun | None:
    found = store.find(ref)
    if len(found) > 1:
        raise ComparisonError(ambiguous(ref, found))
    return found[0] if found else None


class Lookup(NamedTuple):
    """How a name is resolved to a run: the comparison's mode and metric (what makes a run
    comparable), the MLflow URI a `models:/` alias is read from, and whether a model name may
    resolve to the noise command's runs (`noise_runs`)."""

    mode: CompareMode
    mlflow_uri: str | None
    metric: str = "accuracy"
    noise: bool = False


def resolve(store: SqlStore, ref: str, other: tuple[StoredRun, str] | None, how: Lookup) -> StoredRun:
    """A run from a SQL id or prefix, an MLflow run id, `models:/<name>@<alias>`, or a model name.

    A model name resolves to its newest finished evaluation (with `noise`, the noise command's runs
    count too); with `other` (the run already resolved and its side, "baseline" or "candidate"), to
    its newest run comparable with that one.
    """
    mode, metric, noise = how.mode, how.metric, how.noise
    if ref.startswith("models:/"):
        from mmlu_track.store.mlflow import MlflowUnavailable, alias_run_id

        try:
            ref = alias_run_id(how.mlflow_uri, ref)
        except LookupError as err:
            raise ComparisonError(str(err)) from err
        except MlflowUnavailable as err:
            raise ComparisonError(f"cannot resolve {ref}: {err}") from err
    run = _by_id(store, ref)
    if run is not None:
        return run
    runs = store.finished_runs(ref, noise)
    if not runs:
        only_noise = not noise and store.finished_runs(ref, True)
        raise ComparisonError(
            f"{ref!r} has only the noise command's runs in {store.url}: evaluate the model, name a run by "
            "its id, or add noise_runs=true"
            if only_noise
            else f"unknown run {ref!r}: not a run id, MLflow run id or model name with a finished run "
            f"in {store.url}"
        )
    if other is None:
        return runs[0]
    known, side = other

    def problems(run: StoredRun) -> list[str]:
        pair_ = (known, run) if side == "baseline" else (run, known)
        return incomparable(*pair_, mode, metric)

    runs = [r for r in runs if r.id != known.id]  # never the other side's own run
    for run in runs:
        if not problems(run):
            return run
    if not runs:
        raise ComparisonError(
            f"{ref!r} has no finished run but the {side} run {known.id[:12]} itself: a verdict needs two "
            f"different runs; name the {'candidate' if side == 'baseline' else 'baseline'} by its run id "
            "(python -m mmlu_track.runs list)"
        )
    raise ComparisonError(
        f"none of the {len(runs)} other finished runs of {ref!r} is comparable with the {side} run "
        f"{known.id[:12]}: the newest has {problems(runs[0])[0]}"
    )


def _looks_like_id(store: SqlStore, ref: str) -> bool:
    return ref.startswith("models:/") or _by_id(store, ref) is not None


def _truncated(run: StoredRun) -> int:
    record = run.record
    return record.truncated if record else 0


def _promote(cand: StoredRun, alias: str, g: GateConfig, uri: str | None) -> str:
    """Move `alias` to the candidate that passed; a promotion asked for and not done is an error."""
    from mmlu_track.store.mlflow import MlflowUnavailable, Promotion, promote

    model = g.registered_model or cand.model_name
    if not cand.mlflow_run_id:
        raise ComparisonError(
            f"cannot promote {model}@{alias}: the candidate run {cand.id[:12]} is not in MLflow "
            "(log it with `python -m mmlu_track.runs sync`, then compare again)"
        )
    record = cand.record
    source = record.start.model.location if record else cand.model_name
    try:
        version = promote(Promotion(uri, model, alias, cand.mlflow_run_id, str(source)))
    except MlflowUnavailable as err:
        raise ComparisonError(str(err)) from err
    return f"promoted: {model}@{alias} -> version {version} (candidate run {cand.id[:12]})"


class Paired(NamedTuple):
    """The questions a comparison pairs, both runs' answers to them, what the choice of questions
    adds to the verdict's reasons, and how many are compared (every figure beside the verdict is
    at that n)."""

    baseline: list[QuestionResult]
    candidate: list[QuestionResult]
    notes: list[str]
    compared: int


def execute(cfg: CompareConfig, output_dir: Path, echo: Any = print, docs_for: DocsFor | None = None) -> int:
    """Run one comparison end to end; return the exit code. `docs_for`: a run's questions' text
    (the entry point reads the data; the gate does not), for MLflow's per-question table. The steps:
    the two runs (`resolve_pair`), the questions they pair (`paired`), the decision (`decided`),
    its reports and record (`publish`), and a promotion when one was asked for and earned."""
    store = open_existing_store(cfg.tracking)
    try:
        base, cand = resolve_pair(store, cfg)
        outcome = decided(store, cfg, base, cand, paired(store, cfg, base, cand), docs_for)
        publish(store, outcome, output_dir, echo)
        g = outcome.comp.settings
        if g.promote_alias and outcome.verdict.status == "pass" and cfg.mode == "gate":
            echo(_promote(cand, g.promote_alias, g, cfg.tracking.mlflow_uri))
        return outcome.verdict.exit_code
    finally:
        store.close()


def resolve_pair(store: SqlStore, cfg: CompareConfig) -> tuple[StoredRun, StoredRun]:
    """(baseline, candidate): two different runs, comparable under `cfg` (`check_comparable`).

    A model name resolves to its newest run comparable with the other side (never to that run
    itself): the candidate is resolved first, unless only the baseline is named by id."""
    how = Lookup(cfg.mode, cfg.tracking.mlflow_uri, cfg.gate.metric, cfg.noise_runs)
    if _looks_like_id(store, cfg.baseline) and not _looks_like_id(store, cfg.candidate):
        base = resolve(store, cfg.baseline, None, how)
        cand = resolve(store, cfg.candidate, (base, "baseline"), how)
    else:
        cand = resolve(store, cfg.candidate, None, how)
        base = resolve(store, cfg.baseline, (cand, "candidate"), how)
    if base.id == cand.id:
        raise ComparisonError(
            f"baseline and candidate are the same run {base.id[:12]} ({cfg.baseline!r} and "
            f"{cfg.candidate!r}): a verdict needs two different runs"
        )
    check_comparable(base, cand, cfg, store)
    return base, cand


def paired(store: SqlStore, cfg: CompareConfig, base: StoredRun, cand: StoredRun) -> Paired:
    """Both runs' answers, refused unless a gate's prompts are the same question by question; with
    `gate.questions=clean` only the questions MMLU-Redux annotates ok."""
    base_results, cand_results = store.question_results(base.id), store.question_results(cand.id)
    if cfg.mode == "gate":
        same_prompts(base_results, cand_results)
    notes = disputed(base_results, cand_results, cfg.gate.metric)
    compared = cand.protocol.n_questions
    if cfg.gate.questions == "clean":  # every figure beside the verdict at the n compared
        base_results, cand_results, left_out = only_clean(base_results, cand_results)
        notes, compared = [left_out], len(cand_results)
    return Paired(base_results, cand_results, notes, compared)


def decided(
    store: SqlStore,
    cfg: CompareConfig,
    base: StoredRun,
    cand: StoredRun,
    pairs: Paired,
    docs_for: DocsFor | None,
) -> Outcome:
    """The comparison decided: δ chosen (a number, or `gate.margin=auto`'s noise floor at the n
    compared: the policy the comparison carries as `comp.settings`; `cfg` stays as asked), the
    statistics, the verdict and every note beside it."""
    noise = store.noise.latest(cand.protocol)
    g = auto_margin(cfg.gate, noise, cand.model_name, pairs.compared)
    metric = cfg.gate.metric
    groups = origins(pairs.baseline, pairs.candidate, metric)
    comp = compare(pair(pairs.baseline, pairs.candidate, metric), g, groups=groups)
    verdict = decide(comp, g) if cfg.mode == "gate" else analysis(comp)
    sides = (("the baseline", _truncated(base)), ("the candidate", _truncated(cand)))
    notes = [f"{side} run scored {n} truncated prompts (allow_truncation=true)" for side, n in sides if n]
    notes += unrecorded(base, cand) + metric_note(base, cand, cfg.gate.metric) + pairs.notes
    if cfg.mode == "gate":
        notes += noise_notes(noise, comp, g, verdict.status)
        if cfg.gate.margin == "auto" and noise is not None:
            notes.append(
                f"gate.margin=auto: δ = {100 * g.delta:.2f} pts, the floor of measurement "
                f"{noise.id[:12]} at n = {pairs.compared:,}"
            )
    verdict = replace(verdict, reasons=(*notes, *verdict.reasons))
    docs = questions_text(docs_for, base, cfg.tracking.mlflow)  # the questions both scored
    results = (pairs.baseline, pairs.candidate)
    return Outcome(comp, verdict, base, cand, cfg, results=results, docs=docs)
