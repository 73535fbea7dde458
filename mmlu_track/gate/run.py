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
from mmlu_track.gate.policy import analysis, check_comparable, decide, differences
from mmlu_track.gate.stats import ComparisonError, compare, pair

if TYPE_CHECKING:
    from mmlu_track.store.orm import Run
    from mmlu_track.store.sql import SqlStore


def _alias_run_id(ref: str, mlflow_uri: str | None) -> str:
    name, _, alias = ref.removeprefix("models:/").partition("@")
    if not alias:
        raise ComparisonError(f"{ref!r}: write a registered model alias as models:/<name>@<alias>")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        version = MlflowClient(tracking_uri=mlflow_uri).get_model_version_by_alias(name, alias)
    except MlflowException as err:
        raise ComparisonError(f"no MLflow model version for {ref}: {err.message}") from err
    if not version.run_id:
        raise ComparisonError(f"the model version behind {ref} has no run id")
    return str(version.run_id)


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
        ref = _alias_run_id(ref, mlflow_uri)
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
    record = json.loads(run.record_json or "{}")
    return int(record.get("prompt", {}).get("truncated", 0))


def _promote(cand: Run, g: GateConfig, uri: str | None) -> str:
    """Move the alias to the candidate that passed; a promotion asked for and not done is an error."""
    from mmlu_track.store.mlflow import MlflowUnavailable, promote

    assert g.promote_alias is not None
    model = g.registered_model or cand.model_name
    if not cand.mlflow_run_id:
        raise ComparisonError(
            f"cannot promote {model}@{g.promote_alias}: the candidate run {cand.id[:12]} is not in MLflow "
            "(log it with `python -m mmlu_track.runs sync`, then compare again)"
        )
    source = json.loads(cand.record_json or "{}").get("model", {}).get("location") or cand.model_name
    try:
        version = promote(uri, model, g.promote_alias, cand.mlflow_run_id, str(source))
    except MlflowUnavailable as err:
        raise ComparisonError(str(err)) from err
    return f"promoted: {model}@{g.promote_alias} -> version {version} (candidate run {cand.id[:12]})"


def warn(message: str) -> None:
    print(f"mmlu_track: warning: {message}", file=sys.stderr)


def execute(cfg: CompareConfig, output_dir: Path, echo: Any = print) -> int:
    """Run one comparison end to end; return the exit code."""
    from mmlu_track.gate import report
    from mmlu_track.store.orm import ComparisonRow
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
        doc = report.to_json(comp, verdict, base, cand, cfg)
        markdown = report.markdown(comp, verdict, base, cand, cfg)
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "report.md").write_text(markdown, encoding="utf-8")
        (output_dir / "report.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
        report.deltas_png(
            comp,
            output_dir / "deltas.png",
            report.title(base, cand, cfg.mode),
            margin_line=cfg.mode == "gate",
        )
        if summary := os.environ.get("GITHUB_STEP_SUMMARY"):
            with open(summary, "a", encoding="utf-8") as f:
                f.write(markdown + "\n")
        echo(report.console(comp, verdict, base, cand, cfg))
        echo(f"reports in {output_dir}")
        row = ComparisonRow(
            id=uuid.uuid4().hex, baseline_run_id=base.id, candidate_run_id=cand.id, mode=cfg.mode,
            policy=g.name, verdict=verdict.status, delta_micro=comp.micro.delta, delta_macro=comp.macro.delta,
            p_regression=comp.micro.p_regression, p_noninferiority=comp.noninferiority.p_value,
            margin=g.margin, n_flagged=sum(s.flagged for s in comp.subjects), report_json=json.dumps(doc),
            created_at=datetime.now(UTC).replace(tzinfo=None),
        )  # fmt: skip
        store.save_comparison(row)
        if cfg.tracking.mlflow:
            mlflow_id = report.log_to_mlflow(
                comp, verdict, doc=doc, output_dir=output_dir, uri=uri, experiment=cfg.compare_experiment
            )
            if mlflow_id:
                store.set_comparison_mlflow(row.id, mlflow_id)
        if g.promote_alias and verdict.status == "pass" and cfg.mode == "gate":
            echo(_promote(cand, g, uri))
        return verdict.exit_code
    finally:
        store.close()
