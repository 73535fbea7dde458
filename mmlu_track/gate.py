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
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.comparison import Comparison, ComparisonError, Settings, compare, pair
from mmlu_track.config import CompareConfig, GateConfig

if TYPE_CHECKING:
    from mmlu_track.orm import Run
    from mmlu_track.store_sql import SqlStore

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2
Mode = str  # gate | fewshot_gap (CompareConfig.mode)


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
    cfg = json.loads(run.config_json)
    return cfg["scoring"]["method"], cfg["scoring"].get("calibration", "none")


def differences(base: Run, cand: Run, mode: Mode) -> list[str]:
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


def check_comparable(base: Run, cand: Run, mode: Mode) -> None:
    """Refuse unfinished runs and pairs whose differences are not the thing being compared."""
    for run, side in ((base, "baseline"), (cand, "candidate")):
        if run.status != "finished":
            raise ComparisonError(f"the {side} run {run.id} is {run.status}, not finished")
    if problems := differences(base, cand, mode):
        raise ComparisonError(f"runs are not comparable: {problems[0]}")


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
    store: SqlStore, ref: str, other: tuple[Run, str] | None, mode: Mode, mlflow_uri: str | None
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
    from mmlu_track.store_mlflow import MlflowUnavailable, promote

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
    from mmlu_track import report
    from mmlu_track.orm import ComparisonRow
    from mmlu_track.store_sql import SqlStore

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
        settings = Settings(g.alpha, g.margin, g.min_effect, g.correction, g.bootstrap_resamples, g.seed)
        comp = compare(pair(store.question_results(base.id), store.question_results(cand.id)), settings)
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


def _raw_refs(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Run references as typed: Hydra reads `baseline=8809` as an int and `1e5` as a float."""
    for key in ("baseline", "candidate"):
        if raw.get(key) is None or isinstance(raw[key], str):
            continue
        for override in overrides:
            name, sep, value = override.partition("=")
            if sep and name.lstrip("+~") == key:
                raw[key] = value.strip().strip("'\"")
    return raw


def main() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig
    from omegaconf.errors import OmegaConfBaseException

    from mmlu_track.__main__ import (
        _fail,
        check_writable_cwd,
        config_message,
        hydra_exit_codes,
        plain,
    )
    from mmlu_track.config import ConfigError, compare_config_from_dict
    from mmlu_track.resources import CONF_DIR
    from mmlu_track.store_sql import StoreError

    codes: list[int] = []

    @hydra.main(config_path=str(CONF_DIR), config_name="compare", version_base="1.3")
    def app(cfg: DictConfig) -> None:
        try:
            raw = _raw_refs(plain(cfg), list(HydraConfig.get().overrides.task))
            compare_cfg = compare_config_from_dict(raw)
            codes.append(execute(compare_cfg, Path(HydraConfig.get().runtime.output_dir)))
        except (ConfigError, OmegaConfBaseException, ComparisonError, StoreError) as err:
            _fail(config_message(err))

    check_writable_cwd(sys.argv[1:])
    with hydra_exit_codes("interrupted; no verdict"):
        app()
    # The verdict's code leaves only here: any exit 1 from inside Hydra is a usage error, not a verdict.
    sys.exit(max(codes, default=EXIT_PASS))
