"""The release gate: resolve two stored runs, compare them, decide, report, record; exit codes.

    python -m mmlu_track.compare baseline=RUN candidate=RUN [gate=strict|warn_only] [mode=fewshot_gap]

Exit codes: 0 pass (or warn-only, or an analysis), 1 regression or inconclusive, 2 unusable input
(Hydra's own usage errors included: `main` turns its exit 1 into 2).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.config import CompareConfig, CompareMode, GateConfig
from mmlu_track.console import warn
from mmlu_track.gate.policy import (
    Verdict,
    analysis,
    check_comparable,
    decide,
    differences,
    same_prompts,
    unrecorded,
)
from mmlu_track.gate.stats import Comparison, ComparisonError, compare, pair
from mmlu_track.records.stored import ComparisonEntry
from mmlu_track.store.sql import open_store

if TYPE_CHECKING:
    from mmlu_track.records.stored import StoredRun
    from mmlu_track.store.sql import SqlStore


def _by_id(store: SqlStore, ref: str) -> StoredRun | None:
    found = store.find(ref)
    if len(found) > 1:
        listed = ", ".join(f"{r.id[:12]} ({r.model_name}, k={r.k}, {r.status})" for r in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise ComparisonError(f"{ref!r} matches {len(found)} runs: {listed}{more}; give more of the id")
    return found[0] if found else None


def resolve(
    store: SqlStore, ref: str, other: tuple[StoredRun, str] | None, mode: CompareMode, mlflow_uri: str | None
) -> StoredRun:
    """A run from a SQL id or prefix, an MLflow run id, `models:/<name>@<alias>`, or a model name.

    A model name resolves to its newest finished run; with `other` (the run already resolved and
    its side, "baseline" or "candidate"), to its newest run comparable with that one.
    """
    if ref.startswith("models:/"):
        from mmlu_track.store.registry import alias_run_id

        try:
            ref = alias_run_id(mlflow_uri, ref)
        except LookupError as err:
            raise ComparisonError(str(err)) from err
    run = _by_id(store, ref)
    if run is not None:
        return run
    runs = store.finished_runs(ref)
    if not runs:
        raise ComparisonError(
            f"unknown run {ref!r}: not a run id, MLflow run id or model name with a finished run "
            f"in {store.url}"
        )
    if other is None:
        return runs[0]
    known, side = other

    def problems(run: StoredRun) -> list[str]:
        return differences(known, run, mode) if side == "baseline" else differences(run, known, mode)

    runs = [r for r in runs if r.id != known.id]  # never the other side's own run
    for run in runs:
        if not problems(run):
            return run
    if not runs:
        raise ComparisonError(
            f"{ref!r} has no finished run but the {side} run {known.id[:12]} itself: a verdict needs two "
            "different runs; name the baseline by its run id (python -m mmlu_track.runs list)"
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
    from mmlu_track.store.mlflow_client import MlflowUnavailable
    from mmlu_track.store.registry import promote

    model = g.registered_model or cand.model_name
    if not cand.mlflow_run_id:
        raise ComparisonError(
            f"cannot promote {model}@{alias}: the candidate run {cand.id[:12]} is not in MLflow "
            "(log it with `python -m mmlu_track.runs sync`, then compare again)"
        )
    record = cand.record
    source = record.start.model.location if record else cand.model_name
    try:
        version = promote(uri, model, alias, cand.mlflow_run_id, str(source))
    except MlflowUnavailable as err:
        raise ComparisonError(str(err)) from err
    return f"promoted: {model}@{alias} -> version {version} (candidate run {cand.id[:12]})"


def comparison_metrics(
    comp: Comparison, verdict: Verdict, mode: str, *, sequential: bool
) -> dict[str, float]:
    """A comparison's MLflow metrics, in points and named by what they mean: a gate's under `gate/`,
    a few-shot gap's under `gap/` (no verdict, no margin); a sequential gate's fixed-sample
    non-inferiority test, which decided nothing, under `reference/`."""
    group = "gap" if mode == "fewshot_gap" else "gate"
    out = {
        f"{group}/delta_micro_pts": 100 * comp.micro.delta,
        f"{group}/delta_macro_pts": 100 * comp.macro.delta,
        f"{group}/ci_low_micro_pts": 100 * comp.micro.ci_low,
        f"{group}/ci_high_micro_pts": 100 * comp.micro.ci_high,
        f"{group}/lost": float(comp.micro.lost),
        f"{group}/gained": float(comp.micro.gained),
        "baseline/acc_micro_pct": 100 * comp.micro.baseline_acc,
        "candidate/acc_micro_pct": 100 * comp.micro.candidate_acc,
    }
    if mode == "fewshot_gap":
        return out
    ni = comp.noninferiority
    fixed = "reference/fixed_sample_" if sequential else "gate/"
    return out | {
        "gate/p_regression": comp.micro.p_regression or 1.0,
        f"{fixed}p_noninferiority": ni.p_value,
        f"{fixed}noninferiority_lower_bound_pts": 100 * ni.lower_bound,
        "gate/n_flagged": float(sum(d.flagged for d in comp.subjects)),
        "gate/exit_code": float(verdict.exit_code),
    }


def _run_name(run: StoredRun) -> str:
    record = run.record
    return record.start.name if record else f"{run.model_name} {run.id[:8]}"


def _log_comparison(
    comp: Comparison,
    verdict: Verdict,
    runs: tuple[StoredRun, StoredRun],
    cfg: CompareConfig,
    *,
    reports: tuple[str, Path],
    extra: dict[str, float] | None = None,
) -> str | None:
    """The comparison as an MLflow run named by its verdict and what differs (the report's title),
    described by a plain line (verdict, Δ, both accuracies) and the report's head, linked to both
    runs' own MLflow runs; None (warned) on failure: logging never costs the verdict."""
    from mmlu_track.gate import report
    from mmlu_track.store.mlflow import log_comparison
    from mmlu_track.store.mlflow_client import MlflowUnavailable
    from mmlu_track.store.mlflow_pages import NOTE_TAG

    (base, cand), (markdown, output_dir) = runs, reports
    gap = cfg.mode == "fewshot_gap"
    metrics = comparison_metrics(comp, verdict, cfg.mode, sequential=extra is not None)
    params = {
        "baseline_run": base.id,
        "candidate_run": cand.id,
        "mode": "sequential" if extra else cfg.mode,
        "alpha": str(cfg.gate.alpha),
        **({} if gap else {"policy": cfg.gate.name, "margin_pts": str(100 * cfg.gate.margin)}),
        **({"looks": str(cfg.gate.looks)} if extra else {}),
    }
    # Runs logged while MLflow was down have no MLflow id until `runs sync`.
    sides = (("baseline", base), ("candidate", cand))
    params.update({f"{side}_mlflow_run": run.mlflow_run_id for side, run in sides if run.mlflow_run_id})
    label = "few-shot gap" if gap else verdict.status.upper()
    head = markdown.split("\n### Subjects", maxsplit=1)[0]
    heading = report.title(base, cand, cfg.mode)  # what a reviewer recognises: what differs
    m = comp.micro
    # Plain first line: the comparisons' runs table shows it in its Description column
    summary = (
        f"{label}: Δ micro {100 * m.delta:+.2f} pts [{100 * m.ci_low:+.2f}, {100 * m.ci_high:+.2f}], "
        f"{m.lost} lost / {m.gained} gained · baseline {100 * m.baseline_acc:.2f} % → candidate "
        f"{100 * m.candidate_acc:.2f} % ({m.n:,} paired questions)"
    )
    try:
        return log_comparison(
            uri=cfg.tracking.mlflow_uri,
            experiment=cfg.compare_experiment,
            name=heading if gap else f"{label}: {heading}",
            run_tags={"verdict": verdict.status, NOTE_TAG: f"{summary}\n\n{head}"},
            run_params=params,
            run_metrics={**metrics, **(extra or {})},
            files=[output_dir / name for name in ("report.md", "report.json", "deltas.png")],
            candidate=(cand.mlflow_run_id, f"{label} vs baseline {_run_name(base)}")
            if cand.mlflow_run_id
            else None,
        )
    except MlflowUnavailable as err:
        warn(f"comparison not logged to MLflow: {err}")
        return None


def execute(cfg: CompareConfig, output_dir: Path, echo: Any = print) -> int:
    """Run one comparison end to end; return the exit code."""
    store = open_store(cfg.tracking)
    try:
        uri = cfg.tracking.mlflow_uri
        # A model name resolves to its newest run comparable with the other side (never to that run
        # itself): resolve the candidate first, unless only the baseline is named by id.
        if _looks_like_id(store, cfg.baseline) and not _looks_like_id(store, cfg.candidate):
            base = resolve(store, cfg.baseline, None, cfg.mode, uri)
            cand = resolve(store, cfg.candidate, (base, "baseline"), cfg.mode, uri)
        else:
            cand = resolve(store, cfg.candidate, None, cfg.mode, uri)
            base = resolve(store, cfg.baseline, (cand, "candidate"), cfg.mode, uri)
        if base.id == cand.id:
            raise ComparisonError(
                f"baseline and candidate are the same run {base.id[:12]} ({cfg.baseline!r} and "
                f"{cfg.candidate!r}): a verdict needs two different runs"
            )
        check_comparable(base, cand, cfg.mode, store)
        g = cfg.gate
        base_results, cand_results = store.question_results(base.id), store.question_results(cand.id)
        if cfg.mode == "gate":
            same_prompts(base_results, cand_results)
        comp = compare(pair(base_results, cand_results), g)
        verdict = decide(comp, g) if cfg.mode == "gate" else analysis(comp)
        sides = (("the baseline", _truncated(base)), ("the candidate", _truncated(cand)))
        notes = [f"{side} run scored {n} truncated prompts (allow_truncation=true)" for side, n in sides if n]
        notes += unrecorded(base, cand)
        verdict = replace(verdict, reasons=(*notes, *verdict.reasons))
        publish(store, comp, verdict, base=base, cand=cand, cfg=cfg, output_dir=output_dir, echo=echo)
        if g.promote_alias and verdict.status == "pass" and cfg.mode == "gate":
            echo(_promote(cand, g.promote_alias, g, uri))
        return verdict.exit_code
    finally:
        store.close()


def publish(
    store: SqlStore,
    comp: Comparison,
    verdict: Verdict,
    *,
    base: StoredRun,
    cand: StoredRun,
    cfg: CompareConfig,
    output_dir: Path,
    echo: Any,
    extra: tuple[dict[str, Any], dict[str, float]] | None = None,
) -> None:
    """The comparison's reports (report.md, report.json, deltas.png, the job summary, the console),
    its row in the SQL store and its MLflow run. `extra`: a section of report.json and metrics
    (the sequential gate's). The reports go into `output_dir`, or a subfolder of it named after the
    comparison when another comparison's reports are already there: a report is never overwritten."""
    from mmlu_track.gate import report

    g = cfg.gate
    comparison_id = uuid.uuid4().hex
    doc = report.to_json(comp, verdict, base, cand, cfg)
    if extra:
        doc.update(extra[0])
    sequential = extra[0]["sequential"] if extra else None
    markdown = report.markdown(comp, verdict, base, cand, cfg, sequential=sequential)
    heading = report.title(base, cand, cfg.mode)
    if sequential:  # the plot's intervals are not what decided
        heading += (
            f"\nsequential gate: {sequential['decision']} at look {sequential['look']} of "
            f"{sequential['looks']}, {sequential['questions_used']:,} questions (fixed-sample intervals, "
            "for reference)"
        )
    output_dir = _own_folder(output_dir, f"compare-{cand.id[:12]}-vs-{base.id[:12]}", comparison_id)
    try:
        (output_dir / "report.md").write_text(markdown, encoding="utf-8")
        (output_dir / "report.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
        report.deltas_png(comp, output_dir / "deltas.png", heading, margin_line=cfg.mode == "gate")
    except OSError as err:
        raise _unwritable(output_dir, err) from err
    _append_summary(markdown)
    echo(report.console(comp, verdict, base, cand, cfg, sequential=sequential))
    echo(f"reports in {output_dir}")
    entry = ComparisonEntry(
        id=comparison_id, baseline_run_id=base.id, candidate_run_id=cand.id,
        mode="sequential" if extra else cfg.mode,
        policy=g.name, verdict=verdict.status, delta_micro=comp.micro.delta, delta_macro=comp.macro.delta,
        p_regression=comp.micro.p_regression, p_noninferiority=comp.noninferiority.p_value,
        margin=g.margin, n_flagged=sum(s.flagged for s in comp.subjects), report_json=json.dumps(doc),
        created_at=datetime.now(UTC).replace(tzinfo=None),
    )  # fmt: skip
    store.save_comparison(entry)
    metrics = extra[1] if extra else None
    if cfg.tracking.mlflow and (
        mlflow_id := _log_comparison(
            comp, verdict, (base, cand), cfg, reports=(markdown, output_dir), extra=metrics
        )
    ):
        store.set_comparison_mlflow(entry.id, mlflow_id)


def _own_folder(output_dir: Path, name: str, comparison_id: str) -> Path:
    """`output_dir`, or a subfolder `name` (else `name`-<id>) when another comparison's reports are
    there: a report is never overwritten. Its report.md exists (empty) on return."""
    try:
        # The last choice holds this comparison's own id: it is never taken.
        for folder in (output_dir, output_dir / name, output_dir / f"{name}-{comparison_id[:12]}"):
            folder.mkdir(parents=True, exist_ok=True)
            if (folder / "report.json").exists():
                continue
            try:  # created exclusively: of two compares sharing a folder at once, one gets it
                (folder / "report.md").open("x").close()
                break
            except FileExistsError:
                continue
    except OSError as err:
        raise _unwritable(output_dir, err) from err
    return folder


def _unwritable(folder: Path, err: OSError) -> ComparisonError:
    # A full disk or a read-only folder: exit 2 in one line, never a traceback.
    return ComparisonError(
        f"cannot write the comparison's reports into {folder}: {err.strerror or err}; free space "
        "there, or set hydra.run.dir=DIR to a writable folder with room"
    )


def _append_summary(markdown: str) -> None:
    """The report in the GitHub job summary, when there is one."""
    if summary := os.environ.get("GITHUB_STEP_SUMMARY"):
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(markdown + "\n")
        except OSError as err:  # the reports are written: like MLflow, the summary never costs the verdict
            warn(f"report not appended to GITHUB_STEP_SUMMARY ({summary}): {err.strerror or err}")
