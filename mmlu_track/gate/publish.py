"""A decided comparison, published: its renderings, then the verdict's record.

- `Outcome`: the decided comparison (statistics, verdict, both runs, settings, and the sequential
  gate's own section when it decided) — what every rendering and the record read.
- `render(outcome, output_dir)`: report.md, report.json and deltas.png in the comparison's own
  folder (`_own_folder`: a report is never overwritten); `Reports` says what was written.
- `record_verdict(store, outcome, reports)`: the verdict's record, in one call: its row in the SQL
  store and its MLflow run (linked from the candidate's), MLflow never costing the verdict.
- `publish(store, outcome, output_dir, echo)`: both, with the job summary and the console.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.gate.outcome import Outcome
from mmlu_track.gate.stats import ComparisonError, untested_as_one
from mmlu_track.records.stored import ComparisonEntry
from mmlu_track.support.console import warn

if TYPE_CHECKING:
    from mmlu_track.records.stored import StoredRun
    from mmlu_track.store.mlflow import ComparisonRun
    from mmlu_track.store.sql import SqlStore


@dataclass(frozen=True)
class Reports:
    """What `render` wrote: the report's JSON and Markdown (report.md; `summary`, the same with its
    long table folded, for GitHub's job summary), in `folder`."""

    doc: dict[str, Any]
    markdown: str
    summary: str
    folder: Path
    comparison_id: str


def publish(store: SqlStore, outcome: Outcome, output_dir: Path, echo: Any) -> None:
    """The comparison's reports (files, the job summary, the console), then its record (SQL, MLflow)."""
    from mmlu_track.gate import report

    o = outcome
    reports = render(o, output_dir)
    _append_summary(reports.summary)
    echo(report.console(o))
    echo(f"reports in {reports.folder}")
    if page := record_verdict(store, o, reports):
        echo(f"MLflow: {page}")


def render(outcome: Outcome, output_dir: Path) -> Reports:
    """report.md, report.json, deltas.png into `output_dir`, or a subfolder of it named after the
    comparison when another comparison's reports are already there."""
    from mmlu_track.gate import report
    from mmlu_track.gate.differs import title
    from mmlu_track.gate.plot import Figure, deltas_png

    o, comparison_id = outcome, uuid.uuid4().hex
    doc = report.to_json(o)
    if o.extra:
        doc.update(o.extra[0])
    sequential = o.sequential
    body = report.markdown(o, _experiments(o))
    markdown, summary = body + report.all_subjects(o.comp), body + report.all_subjects_folded(o.comp)
    heading = f"{o.verdict.status.upper()}: {o.verdict.headline}\n{title(o.base, o.cand, o.cfg.mode)}"
    if sequential:  # the fixed-sample intervals of macro and the categories are not what decided
        heading += (
            f"\nsequential gate: {sequential['decision']} at look {sequential['look']} of "
            f"{sequential['looks']}, {sequential['questions_used']:,} questions"
        )
    figure = Figure(
        heading,
        margin_line=o.cfg.mode == "gate",
        verdict_interval=(sequential["lower"], sequential["upper"]) if sequential else None,
    )
    name = f"compare-{o.cand.id[:12]}-vs-{o.base.id[:12]}"
    folder = _own_folder(output_dir, name, comparison_id)
    try:
        (folder / "report.md").write_text(markdown, encoding="utf-8")
        (folder / "report.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
        deltas_png(o.comp, folder / "deltas.png", figure)
    except OSError as err:
        raise _unwritable(folder, err) from err
    return Reports(doc, markdown, summary, folder, comparison_id)


def record_verdict(store: SqlStore, outcome: Outcome, reports: Reports) -> str | None:
    """The verdict's record: its row in the SQL store, then (tracking.mlflow) its MLflow run; the
    run's page, where the store has a UI."""
    o, g = outcome, outcome.comp.settings  # the policy it was decided under: δ a number
    comp = o.comp
    entry = ComparisonEntry(
        id=reports.comparison_id,
        baseline_run_id=o.base.id,
        candidate_run_id=o.cand.id,
        mode=o.mode,
        policy=g.name,
        verdict=o.verdict.status,
        delta_micro=comp.micro.delta,
        delta_macro=comp.macro.delta,
        p_regression=comp.micro.p_regression,
        p_noninferiority=comp.noninferiority.p_value,
        margin=g.delta,
        n_flagged=sum(s.flagged for s in comp.subjects),
        report_json=json.dumps(reports.doc),
        created_at=datetime.now(UTC).replace(tzinfo=None),
    )
    logged = store.comparisons.record(entry, _mlflow_run(o, reports) if o.cfg.tracking.mlflow else None)
    return logged.url if logged else None


def _experiments(o: Outcome) -> dict[str, str]:
    """The two runs' MLflow experiments (run id → experiment id), for the report's links to their
    pages; empty where MLflow is off, not a server, or does not answer (the links fall back)."""
    uri, ids = o.server, [r.mlflow_run_id for r in (o.base, o.cand) if r.mlflow_run_id]
    if not (o.cfg.tracking.mlflow and ids and uri):
        return {}
    from mmlu_track.store.mlflow import experiments_of

    return experiments_of(uri, ids)


def comparison_metrics(outcome: Outcome) -> dict[str, float]:
    """A comparison's MLflow metrics: differences of accuracy (Δ, its interval and bound) in points
    (`_pts`), the accuracies as fractions as evaluations log them; a gate's under `gate/`,
    a few-shot gap's under `gap/` (no verdict, no margin); a sequential gate's fixed-sample
    non-inferiority test, which decided nothing, under `reference/`."""
    comp, mode = outcome.comp, outcome.cfg.mode
    group = "gap" if mode == "fewshot_gap" else "gate"
    out = {
        f"{group}/delta_micro_pts": 100 * comp.micro.delta,
        f"{group}/delta_macro_pts": 100 * comp.macro.delta,
        f"{group}/ci_low_micro_pts": 100 * comp.micro.ci_low,
        f"{group}/ci_high_micro_pts": 100 * comp.micro.ci_high,
        f"{group}/lost": float(comp.micro.lost),
        f"{group}/gained": float(comp.micro.gained),
        # accuracies as every evaluation run logs them (a fraction); their difference in points
        "baseline/acc_micro": comp.micro.baseline_acc,
        "candidate/acc_micro": comp.micro.candidate_acc,
    }
    if mode == "fewshot_gap":
        return out
    ni = comp.noninferiority
    # `gate/lower_bound_pts`: what the verdict held against −δ (the runs table's column beside the
    # margin): Tango's one-sided bound, or a sequential gate's anytime-valid lower end.
    out["gate/lower_bound_pts"] = 100 * ni.lower_bound
    if (seq := outcome.sequential) is not None:  # the verdict's interval is the anytime-valid one
        out["reference/fixed_sample_ci_low_micro_pts"] = out.pop("gate/ci_low_micro_pts")
        out["reference/fixed_sample_ci_high_micro_pts"] = out.pop("gate/ci_high_micro_pts")
        out["reference/fixed_sample_lower_bound_pts"] = out.pop("gate/lower_bound_pts")
        out["gate/ci_low_micro_pts"], out["gate/ci_high_micro_pts"] = 100 * seq["lower"], 100 * seq["upper"]
        out["gate/lower_bound_pts"] = 100 * seq["lower"]
    fixed = "reference/fixed_sample_" if seq is not None else "gate/"
    out |= {
        "gate/p_regression": untested_as_one(comp.micro.p_regression),
        f"{fixed}p_noninferiority": ni.p_value,
        "gate/n_flagged": float(sum(d.flagged for d in comp.subjects)),
        "gate/exit_code": float(outcome.verdict.exit_code),
    }
    # The run's page lists metrics as logged: what decided (Δ, its interval, the bound) first.
    first = (
        "gate/delta_micro_pts",
        "gate/ci_low_micro_pts",
        "gate/ci_high_micro_pts",
        "gate/lower_bound_pts",
    )
    return {k: out[k] for k in first} | out


def _run_name(run: StoredRun) -> str:
    record = run.record
    return record.start.name if record else f"{run.model_name} {run.id[:8]}"


def _mlflow_run(outcome: Outcome, reports: Reports) -> ComparisonRun:
    """The comparison as MLflow mirrors it: a run named by its verdict and what differs (the
    report's title), described by a plain line (verdict, Δ, both accuracies) and the report's head,
    linked to both runs' own MLflow runs."""
    from mmlu_track.gate import report
    from mmlu_track.gate.differs import title
    from mmlu_track.store.mlflow import ComparisonRun, PairedQuestions, Target

    o, cfg = outcome, outcome.cfg
    base, cand, extra = o.base, o.cand, o.extra
    gap = cfg.mode == "fewshot_gap"
    params = {
        "baseline_run": base.id,
        "candidate_run": cand.id,
        "mode": o.mode,
        "alpha": str(o.comp.settings.alpha),
        **({} if gap else {"policy": o.comp.settings.name, "margin_pts": str(100 * o.comp.settings.delta)}),
        **({"looks": str(cfg.gate.looks)} if extra else {}),
        **({"questions": cfg.gate.questions} if cfg.gate.questions != "all" else {}),  # MMLU-Redux's ok only
    }
    # Runs logged while MLflow was down have no MLflow id until `runs sync`.
    sides = (("baseline", base), ("candidate", cand))
    params.update({f"{side}_mlflow_run": run.mlflow_run_id for side, run in sides if run.mlflow_run_id})
    label = "few-shot gap" if gap else o.verdict.status.upper()
    head = "\n".join(report.description(o))
    heading = title(base, cand, cfg.mode)  # what a reviewer recognises: what differs
    m = o.comp.micro
    # The verdict's own interval: a sequential gate's is the anytime-valid one.
    low, high = (o.sequential["lower"], o.sequential["upper"]) if o.sequential else (m.ci_low, m.ci_high)
    # Plain first line: the comparisons' runs table shows it in its Description column
    summary = (
        f"{label}: Δ micro {100 * m.delta:+.2f} pts [{100 * low:+.2f}, {100 * high:+.2f}], "
        f"{m.lost} lost / {m.gained} gained · baseline {100 * m.baseline_acc:.2f} % → candidate "
        f"{100 * m.candidate_acc:.2f} % ({m.n:,} paired questions)"
    )
    return ComparisonRun(
        target=Target(cfg.tracking.mlflow_uri, cfg.compare_experiment),
        name=heading if gap else f"{label}: {heading}",
        verdict=o.verdict.status,
        description=f"{summary}\n\n{head}",
        params=params,
        metrics={**comparison_metrics(o), **(extra[1] if extra else {})},
        files=tuple(reports.folder / name for name in ("report.md", "report.json", "deltas.png")),
        # An analysis (the few-shot gap) is no gate: the candidate's gate column stays as it was.
        candidate=(cand.mlflow_run_id, f"{label} vs baseline {_run_name(base)}")
        if cand.mlflow_run_id and not gap
        else None,
        paired=PairedQuestions(*o.results, cfg.gate.metric, o.docs) if o.results else None,
    )


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
