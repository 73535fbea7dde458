"""The release gate: resolve two stored runs, compare them, decide, report, record; exit codes.

    python -m mmlu_track.compare baseline=RUN candidate=RUN [gate=strict|warn_only] [mode=fewshot_gap]

Exit codes: 0 pass (or warn-only, or an analysis), 1 regression or inconclusive, 2 unusable input
(Hydra's own usage errors included: `main` turns its exit 1 into 2).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.config import CompareConfig, CompareMode, GateConfig
from mmlu_track.gate.policy import Verdict, analysis, check_comparable, decide, differences
from mmlu_track.gate.stats import Comparison, ComparisonError, compare, pair
from mmlu_track.store.sql import record_of

if TYPE_CHECKING:
    from mmlu_track.store.orm import Run
    from mmlu_track.store.sql import SqlStore


def _by_id(store: SqlStore, ref: str) -> Run | None:
    found = store.find(ref)
    if len(found) > 1:
        listed = ", ".join(f"{r.id[:12]} ({r.model_name}, k={r.k}, {r.status})" for r in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise ComparisonError(f"{ref!r} matches {len(found)} runs: {listed}{more}; give more of the id")
    return found[0] if found else None


def resolve(
    store: SqlStore, ref: str, other: tuple[Run, str] | None, mode: CompareMode, mlflow_uri: str | None
) -> Run:
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

    def problems(run: Run) -> list[str]:
        return differences(known, run, mode) if side == "baseline" else differences(run, known, mode)

    for run in runs:
        if not problems(run):
            return run
    raise ComparisonError(
        f"none of the {len(runs)} finished runs of {ref!r} is comparable with the {side} run "
        f"{known.id[:12]}: the newest has {problems(runs[0])[0]}"
    )


def _looks_like_id(store: SqlStore, ref: str) -> bool:
    return ref.startswith("models:/") or _by_id(store, ref) is not None


def _truncated(run: Run) -> int:
    record = record_of(run)
    return record.truncated if record else 0


def _promote(cand: Run, g: GateConfig, uri: str | None) -> str:
    """Move the alias to the candidate that passed; a promotion asked for and not done is an error."""
    from mmlu_track.store.mlflow import MlflowUnavailable
    from mmlu_track.store.registry import promote

    assert g.promote_alias is not None
    model = g.registered_model or cand.model_name
    if not cand.mlflow_run_id:
        raise ComparisonError(
            f"cannot promote {model}@{g.promote_alias}: the candidate run {cand.id[:12]} is not in MLflow "
            "(log it with `python -m mmlu_track.runs sync`, then compare again)"
        )
    record = record_of(cand)
    source = record.start.model.location if record else cand.model_name
    try:
        version = promote(uri, model, g.promote_alias, cand.mlflow_run_id, str(source))
    except MlflowUnavailable as err:
        raise ComparisonError(str(err)) from err
    return f"promoted: {model}@{g.promote_alias} -> version {version} (candidate run {cand.id[:12]})"


def _log_comparison(
    comp: Comparison,
    verdict: Verdict,
    doc: dict[str, Any],
    output_dir: Path,
    cfg: CompareConfig,
    *,
    extra: dict[str, float] | None = None,
) -> str | None:
    """The comparison as an MLflow run, linked to both runs' own MLflow runs; None (warned) on failure:
    logging never costs the verdict."""
    from mmlu_track.store.mlflow import MlflowUnavailable, log_comparison

    base, cand = doc["baseline"], doc["candidate"]
    metrics = {
        "compare/delta_micro": comp.micro.delta,
        "compare/delta_macro": comp.macro.delta,
        "compare/ci_low_micro": comp.micro.ci_low,
        "compare/ci_high_micro": comp.micro.ci_high,
        "compare/p_regression": comp.micro.p_regression or 1.0,
        "compare/p_noninferiority": comp.noninferiority.p_value,
        "compare/noninferiority_lower_bound": comp.noninferiority.lower_bound,
        "compare/n_flagged": float(sum(d.flagged for d in comp.subjects)),
        "compare/exit_code": float(verdict.exit_code),
        **(extra or {}),
    }
    params = {
        "baseline_run": base["id"],
        "candidate_run": cand["id"],
        "mode": cfg.mode,
        "policy": cfg.gate.name,
        "margin": str(cfg.gate.margin),
        "alpha": str(cfg.gate.alpha),
        **({"sequential": "true", "looks": str(cfg.gate.looks)} if extra else {}),
    }
    # Runs logged while MLflow was down have no MLflow id until `runs sync`.
    params.update({f"{side}_mlflow_run": doc[side]["mlflow_run_id"] for side in ("baseline", "candidate")
                   if doc[side]["mlflow_run_id"]})  # fmt: skip
    try:
        return log_comparison(
            uri=cfg.tracking.mlflow_uri,
            experiment=cfg.compare_experiment,
            name=f"{cand['model']} {cand['id'][:8]} vs {base['model']} {base['id'][:8]}",
            run_tags={"verdict": verdict.status},
            run_params=params,
            run_metrics=metrics,
            files=[output_dir / name for name in ("report.md", "report.json", "deltas.png")],
        )
    except MlflowUnavailable as err:
        warn(f"comparison not logged to MLflow: {err}")
        return None


def warn(message: str) -> None:
    print(f"mmlu_track: warning: {message}", file=sys.stderr)


def execute(cfg: CompareConfig, output_dir: Path, echo: Any = print) -> int:
    """Run one comparison end to end; return the exit code."""
    from mmlu_track.store.sql import SqlStore

    store = SqlStore(cfg.tracking.db_url)
    try:
        uri = cfg.tracking.mlflow_uri
        # A model name resolves to its newest run comparable with the other side: resolve ids first.
        if _looks_like_id(store, cfg.baseline) or not _looks_like_id(store, cfg.candidate):
            base = resolve(store, cfg.baseline, None, cfg.mode, uri)
            cand = resolve(store, cfg.candidate, (base, "baseline"), cfg.mode, uri)
        else:
            cand = resolve(store, cfg.candidate, None, cfg.mode, uri)
            base = resolve(store, cfg.baseline, (cand, "candidate"), cfg.mode, uri)
        check_comparable(base, cand, cfg.mode)
        if base.id == cand.id:
            warn(f"baseline and candidate are the same run ({base.id[:12]}): the comparison shows nothing")
        g = cfg.gate
        comp = compare(pair(store.question_results(base.id), store.question_results(cand.id)), g)
        verdict = decide(comp, g) if cfg.mode == "gate" else analysis(comp)
        sides = (("the baseline", _truncated(base)), ("the candidate", _truncated(cand)))
        notes = [f"{side} run scored {n} truncated prompts (allow_truncation=true)" for side, n in sides if n]
        if base.id == cand.id:
            notes.insert(0, "baseline and candidate are the same run")
        verdict = replace(verdict, reasons=(*notes, *verdict.reasons))
        publish(store, comp, verdict, base=base, cand=cand, cfg=cfg, output_dir=output_dir, echo=echo)
        if g.promote_alias and verdict.status == "pass" and cfg.mode == "gate":
            echo(_promote(cand, g, uri))
        return verdict.exit_code
    finally:
        store.close()


def publish(
    store: SqlStore,
    comp: Comparison,
    verdict: Verdict,
    *,
    base: Run,
    cand: Run,
    cfg: CompareConfig,
    output_dir: Path,
    echo: Any,
    extra: tuple[dict[str, Any], dict[str, float]] | None = None,
) -> None:
    """The comparison's reports (report.md, report.json, deltas.png, the job summary, the console),
    its row in the SQL store and its MLflow run. `extra`: a section of report.json and metrics
    (the sequential gate's)."""
    from mmlu_track.gate import report
    from mmlu_track.store.orm import ComparisonRow

    g = cfg.gate
    doc = report.to_json(comp, verdict, base, cand, cfg)
    if extra:
        doc.update(extra[0])
    markdown = report.markdown(comp, verdict, base, cand, cfg, sequential=extra is not None)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "report.md").write_text(markdown, encoding="utf-8")
    (output_dir / "report.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    heading = report.title(base, cand, cfg.mode)
    if extra and (seq := extra[0].get("sequential")):  # the plot's intervals are not what decided
        heading += (
            f"\nsequential gate: {seq['decision']} at look {seq['look']} of {seq['looks']}, "
            f"{seq['questions_used']:,} questions (fixed-sample intervals, for reference)"
        )
    report.deltas_png(comp, output_dir / "deltas.png", heading, margin_line=cfg.mode == "gate")
    if summary := os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(summary, "a", encoding="utf-8") as f:
            f.write(markdown + "\n")
    echo(report.console(comp, verdict, base, cand, cfg, sequential=extra is not None))
    echo(f"reports in {output_dir}")
    row = ComparisonRow(
        id=uuid.uuid4().hex, baseline_run_id=base.id, candidate_run_id=cand.id,
        mode="sequential" if extra else cfg.mode,
        policy=g.name, verdict=verdict.status, delta_micro=comp.micro.delta, delta_macro=comp.macro.delta,
        p_regression=comp.micro.p_regression, p_noninferiority=comp.noninferiority.p_value,
        margin=g.margin, n_flagged=sum(s.flagged for s in comp.subjects), report_json=json.dumps(doc),
        created_at=datetime.now(UTC).replace(tzinfo=None),
    )  # fmt: skip
    store.save_comparison(row)
    metrics = extra[1] if extra else None
    if cfg.tracking.mlflow and (
        mlflow_id := _log_comparison(comp, verdict, doc, output_dir, cfg, extra=metrics)
    ):
        store.set_comparison_mlflow(row.id, mlflow_id)
