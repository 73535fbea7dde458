"""Reports of a comparison: console table, Markdown (verdict first), JSON, PNG; MLflow logging."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.compare import Comparison, Delta

if TYPE_CHECKING:
    from mmlu_track.config import CompareConfig
    from mmlu_track.gate import Verdict
    from mmlu_track.orm import Run

ICONS = {"pass": "✅ PASS", "regression": "❌ REGRESSION", "analysis": "📊 ANALYSIS"}


def title(base: Run, cand: Run, mode: str) -> str:
    if mode == "fewshot_gap":
        return f"Few-shot gap of {cand.model_name}: k={cand.k} vs k={base.k}"
    return f"{cand.model_name} vs baseline {base.model_name}"


def _pts(x: float) -> str:
    return f"{100 * x:+.2f}"


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"


def _row(d: Delta, mark: str = "") -> str:
    return (
        f"| {mark}{d.name} | {d.n} | {100 * d.baseline_acc:.2f} | {100 * d.candidate_acc:.2f} | "
        f"**{_pts(d.delta)}** | [{_pts(d.ci_low)}, {_pts(d.ci_high)}] | {d.lost} / {d.gained} | "
        f"{_p(d.p_regression)} | {_p(d.p_regression_adj)} |"
    )


_HEADER = (
    "| | n | baseline % | candidate % | Δ pts | 95% CI | lost / gained | p (drop) | p adj. |\n"
    "|---|---:|---:|---:|---:|---|---:|---:|---:|"
)


def markdown(comp: Comparison, verdict: Verdict, base: Run, cand: Run, cfg: CompareConfig) -> str:
    """Verdict first, then the overall rows, then subjects sorted by Δ (flagged marked), full table folded."""
    s = comp.settings
    lines = [
        f"## MMLU {'release gate' if cfg.mode == 'gate' else 'few-shot gap'}: {ICONS[verdict.status]}",
        "",
    ]
    lines += [f"- {r}" for r in verdict.reasons]
    lines += [
        "",
        f"**{title(base, cand, cfg.mode)}** — candidate run `{cand.id[:12]}` vs baseline `{base.id[:12]}`, "
        f"{comp.micro.n} paired questions, formulation `{cand.formulation}`, scoring `{cand.scoring}`, "
        f"k={base.k}{'' if base.k == cand.k else f'→{cand.k}'}, policy `{cfg.gate.name}` "
        f"(α={s.alpha}, δ={100 * s.margin:.1f} pts, min effect {100 * s.min_effect:.0f} pts, "
        f"{s.correction}).",
        "",
        _HEADER,
        _row(comp.micro),
        _row(comp.macro),
        *(_row(c) for c in comp.categories),
        "",
    ]
    ni = comp.noninferiority
    lines.append(
        f"Non-inferiority (Δ micro > −{100 * ni.margin:.1f} pts): one-sided lower bound "
        f"{_pts(ni.lower_bound)} pts, p = {_p(ni.p_value)} → **{'shown' if ni.shown else 'not shown'}**."
    )
    if comp.bootstrap:
        b = comp.bootstrap
        lines.append(
            f"Subject-stratified paired bootstrap ({s.bootstrap_resamples} resamples): micro "
            f"[{_pts(b['micro'][0])}, {_pts(b['micro'][1])}], "
            f"macro [{_pts(b['macro'][0])}, {_pts(b['macro'][1])}] pts."
        )
    ordered = sorted(comp.subjects, key=lambda d: d.delta)
    flagged = [d for d in ordered if d.flagged]
    improved = [d for d in ordered if d.improved]
    lines += ["", f"### Subjects: {len(flagged)} flagged ⚠️, {len(improved)} improved ⬆️", ""]
    shown = flagged + [d for d in ordered if not d.flagged][: max(0, 10 - len(flagged))]
    lines += [_HEADER, *(_row(d, "⚠️ " if d.flagged else "") for d in shown)]
    if improved:
        lines += ["", "Improved: " + ", ".join(f"{d.name} ({_pts(d.delta)})" for d in improved)]
    lines += ["", f"<details><summary>All {len(ordered)} subjects, sorted by Δ</summary>", "", _HEADER]
    lines += [_row(d, "⚠️ " if d.flagged else ("⬆️ " if d.improved else "")) for d in ordered]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def console(comp: Comparison, verdict: Verdict, base: Run, cand: Run, cfg: CompareConfig) -> str:
    width = max(len(d.name) for d in (*comp.subjects, *comp.categories)) + 4
    head = f"{'':<{width}}{'n':>6} {'base %':>7} {'cand %':>7} {'Δ pts':>7}  {'95% CI':<17} {'p adj':>8}"

    def line(d: Delta, mark: str = "  ") -> str:
        ci = f"[{_pts(d.ci_low)}, {_pts(d.ci_high)}]"
        return (
            f"{mark}{d.name:<{width - 2}}{d.n:>6} {100 * d.baseline_acc:7.2f} {100 * d.candidate_acc:7.2f} "
            f"{_pts(d.delta):>7}  {ci:<17} {_p(d.p_regression_adj):>8}"
        )

    rows = [
        f"{ICONS[verdict.status]}  {title(base, cand, cfg.mode)}",
        *(f"  - {r}" for r in verdict.reasons),
        head,
    ]
    rows += [
        line(d, "! " if d.flagged else ("+ " if d.improved else "  "))
        for d in sorted(comp.subjects, key=lambda d: d.delta)
    ]
    rows += ["-" * len(head), *(line(c) for c in comp.categories), line(comp.macro), line(comp.micro)]
    ni = comp.noninferiority
    rows.append(f"non-inferiority (δ={100 * ni.margin:.1f} pts): lower bound {_pts(ni.lower_bound)} pts, "
                f"p={_p(ni.p_value)}, {'shown' if ni.shown else 'NOT shown'}")  # fmt: skip
    return "\n".join(rows)


def to_json(comp: Comparison, verdict: Verdict, base: Run, cand: Run, cfg: CompareConfig) -> dict[str, Any]:
    def run(r: Run) -> dict[str, Any]:
        return {
            "id": r.id, "model": r.model_name, "revision": r.model_revision, "k": r.k,
            "formulation": r.formulation, "scoring": r.scoring, "data_fingerprint": r.data_fingerprint,
            "acc_micro": r.acc_micro, "mlflow_run_id": r.mlflow_run_id,
        }  # fmt: skip

    return {
        "mode": cfg.mode,
        "policy": dataclasses.asdict(cfg.gate),
        "verdict": {
            "status": verdict.status,
            "reasons": list(verdict.reasons),
            "exit_code": verdict.exit_code,
        },
        "baseline": run(base),
        "candidate": run(cand),
        **{k: v for k, v in dataclasses.asdict(comp).items() if k != "settings"},
    }


def deltas_png(comp: Comparison, path: Path, heading: str) -> Path:
    """Per-subject Δ with its interval; flagged subjects red, improved green."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(comp.subjects, key=lambda d: d.delta)
    colors = ["#C44E52" if d.flagged else "#55A868" if d.improved else "#4C72B0" for d in ordered]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.22 * len(ordered) + 1.5)))
    y = range(len(ordered))
    ax.errorbar(
        [100 * d.delta for d in ordered], list(y), fmt="none",
        xerr=[[100 * (d.delta - d.ci_low) for d in ordered], [100 * (d.ci_high - d.delta) for d in ordered]],
        ecolor="#888888", capsize=2,
    )  # fmt: skip
    ax.scatter([100 * d.delta for d in ordered], list(y), c=colors, zorder=3, s=18)
    ax.set_yticks(list(y), [d.name for d in ordered], fontsize=7)
    ax.axvline(0, color="#333333", linewidth=0.8)
    ax.axvline(
        100 * comp.micro.delta, color="#DD8452", linestyle="--", label=f"micro Δ {_pts(comp.micro.delta)}"
    )
    ax.axvline(-100 * comp.settings.margin, color="#C44E52", linestyle=":", label="−δ (margin)")
    ax.set_xlabel("Δ accuracy, points (candidate − baseline), 95% intervals")
    ax.set_title(heading, fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def log_to_mlflow(
    comp: Comparison,
    verdict: Verdict,
    *,
    doc: dict[str, Any],
    output_dir: Path,
    uri: str | None,
    experiment: str,
) -> str | None:
    """Log the comparison as an MLflow run; on failure warn and return None (the SQL row stays)."""
    from mmlu_track.store_mlflow import check_reachable

    try:
        check_reachable(uri)
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = client.create_run(
                exp_id,
                run_name=f"{doc['candidate']['model']} vs {doc['baseline']['model']}",
                tags={"mmlu_track.kind": "comparison", "verdict": verdict.status},
            )
            rid = run.info.run_id
            ts = int(run.info.start_time)
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
            }
            params = {
                "baseline_run": doc["baseline"]["id"],
                "candidate_run": doc["candidate"]["id"],
                "mode": doc["mode"],
                "policy": doc["policy"]["name"],
                "margin": doc["policy"]["margin"],
                "alpha": doc["policy"]["alpha"],
            }
            client.log_batch(
                rid,
                metrics=[Metric(k, float(v), ts, 0) for k, v in metrics.items()],
                params=[Param(k, str(v)) for k, v in params.items()],
            )
            for name in ("report.md", "report.json", "deltas.png"):
                client.log_artifact(rid, str(output_dir / name))
            client.set_terminated(rid)
        return str(rid)
    except Exception as err:  # MlflowUnavailable or MLflow's own errors: logging never costs the verdict
        print(f"mmlu_track: warning: comparison not logged to MLflow: {err}", file=sys.stderr)
        return None
