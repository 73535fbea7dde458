"""The release gate: resolve two stored runs, compare them, decide, report, record; exit codes.

    python -m mmlu_track.compare baseline=RUN candidate=RUN [gate=strict|warn_only] [mode=fewshot_gap]

Exit codes: 0 pass (or warn-only, or an analysis), 1 regression, 2 unusable input.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.compare import Comparison, ComparisonError, Settings, compare, pair
from mmlu_track.config import CompareConfig, GateConfig

if TYPE_CHECKING:
    from mmlu_track.orm import Run
    from mmlu_track.store_sql import SqlStore

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2


@dataclass(frozen=True)
class Verdict:
    status: str  # pass | regression | analysis
    reasons: tuple[str, ...]
    exit_code: int


def decide(comp: Comparison, gate: GateConfig) -> Verdict:
    """Apply a policy to a comparison (see `GateConfig`)."""
    reasons = []
    ni = comp.noninferiority
    if not ni.shown:
        reasons.append(
            f"non-inferiority not shown: the {100 * (1 - gate.alpha):.0f}% lower bound of Δ micro is "
            f"{100 * ni.lower_bound:+.2f} pts, below -{100 * gate.margin:.2f} pts (p = {ni.p_value:.3g})"
        )
    p_overall = comp.micro.p_regression
    if p_overall is not None and p_overall < gate.alpha:
        reasons.append(
            f"significant overall drop: Δ micro {100 * comp.micro.delta:+.2f} pts, {comp.micro.lost} lost vs "
            f"{comp.micro.gained} gained (exact McNemar p = {p_overall:.3g})"
        )
    flagged = [s.name for s in comp.subjects if s.flagged]
    if flagged and gate.fail_on_flagged_subjects:
        reasons.append(f"{len(flagged)} subject(s) regressed significantly: {', '.join(flagged)}")
    if not reasons:
        return Verdict("pass", (), EXIT_PASS)
    return Verdict("regression", tuple(reasons), EXIT_PASS if gate.warn_only else EXIT_REGRESSION)


def _scoring_key(run: Run) -> tuple[str, str]:
    cfg = json.loads(run.config_json)
    return cfg["scoring"]["method"], cfg["scoring"].get("calibration", "none")


def check_comparable(base: Run, cand: Run, mode: str) -> None:
    """Refuse pairs whose differences are not the thing being compared."""
    for run, side in ((base, "baseline"), (cand, "candidate")):
        if run.status != "finished":
            raise ComparisonError(f"the {side} run {run.id} is {run.status}, not finished")
    checks: list[tuple[str, object, object]] = [
        ("questions (data fingerprint)", base.data_fingerprint, cand.data_fingerprint),
        ("formulation", base.formulation, cand.formulation),
        ("scoring", _scoring_key(base), _scoring_key(cand)),
    ]
    if mode == "gate":
        checks.append(("k", base.k, cand.k))
    else:  # fewshot_gap: the same model and questions, only k differs
        checks.append(
            ("model", (base.model_name, base.model_revision), (cand.model_name, cand.model_revision))
        )
        if base.k == cand.k:
            raise ComparisonError(f"mode=fewshot_gap needs two different k, both runs have k={base.k}")
    for what, b, c in checks:
        if b != c:
            raise ComparisonError(f"runs are not comparable: {what} differs (baseline {b}, candidate {c})")


def resolve(store: SqlStore, ref: str, like: Run | None, mlflow_uri: str | None) -> Run:
    """A run from a SQL id or prefix, an MLflow run id, `models:/<name>@<alias>`, or a model name."""
    if ref.startswith("models:/"):
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
        ref = version.run_id
    run = store.get(ref) or store.latest_finished(ref, like) or store.latest_finished(ref)
    if run is None:
        raise ComparisonError(
            f"unknown run {ref!r}: not a run id, MLflow run id or model name in {store.url}"
        )
    return run


def _looks_like_id(store: SqlStore, ref: str) -> bool:
    return ref.startswith("models:/") or store.get(ref) is not None


def execute(cfg: CompareConfig, output_dir: Path, echo: Any = print) -> int:
    """Run one comparison end to end; return the exit code."""
    from mmlu_track import report
    from mmlu_track.orm import ComparisonRow
    from mmlu_track.store_sql import SqlStore

    store = SqlStore(cfg.tracking.db_url)
    try:
        uri = cfg.tracking.mlflow_uri
        # A model name resolves to its newest run with the other side's settings: resolve ids first.
        if _looks_like_id(store, cfg.baseline) or not _looks_like_id(store, cfg.candidate):
            base = resolve(store, cfg.baseline, None, uri)
            cand = resolve(store, cfg.candidate, base, uri)
        else:
            cand = resolve(store, cfg.candidate, None, uri)
            base = resolve(store, cfg.baseline, cand, uri)
        check_comparable(base, cand, cfg.mode)
        g = cfg.gate
        settings = Settings(g.alpha, g.margin, g.min_effect, g.correction, g.bootstrap_resamples, g.seed)
        comp = compare(pair(store.question_results(base.id), store.question_results(cand.id)), settings)
        verdict = decide(comp, g) if cfg.mode == "gate" else Verdict("analysis", (), EXIT_PASS)
        doc = report.to_json(comp, verdict, base, cand, cfg)
        markdown = report.markdown(comp, verdict, base, cand, cfg)
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "report.md").write_text(markdown, encoding="utf-8")
        (output_dir / "report.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
        report.deltas_png(comp, output_dir / "deltas.png", report.title(base, cand, cfg.mode))
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
        return verdict.exit_code
    finally:
        store.close()


def main() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig
    from omegaconf.errors import OmegaConfBaseException

    from mmlu_track.__main__ import CONF_DIR, _fail, plain
    from mmlu_track.config import ConfigError, compare_config_from_dict
    from mmlu_track.store_sql import StoreError

    @hydra.main(config_path=str(CONF_DIR), config_name="compare", version_base="1.3")
    def app(cfg: DictConfig) -> None:
        try:
            compare_cfg = compare_config_from_dict(plain(cfg))
            code = execute(compare_cfg, Path(HydraConfig.get().runtime.output_dir))
        except (ConfigError, OmegaConfBaseException, ComparisonError, StoreError) as err:
            _fail(str(err).splitlines()[0])
        sys.exit(code)

    app()
