"""One evaluation, stage by stage: config -> data -> prompts -> scoring -> results -> stores.

No Hydra here: `run` takes a validated `EvalConfig` and the folder to write into. Each subject is
committed to the SQL store as soon as it is scored; an unfinished run with the same identity is
resumed, so a killed evaluation loses at most the subject in progress.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mmlu_track.config import EvalConfig, identity_dict, to_dict
from mmlu_track.eval import models, prompts, provenance
from mmlu_track.eval.data import Question, fingerprint, load_subjects, subsample
from mmlu_track.eval.results import QuestionResult, Scores, aggregate, table, write_jsonl
from mmlu_track.eval.scoring import SCORERS, Score, calibrated_predictions

if TYPE_CHECKING:
    from mmlu_track.store.sql import SqlStore

RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.jsonl"
Echo = Callable[[str], None]


@dataclass(frozen=True)
class RunOutput:
    run_id: str
    results: list[QuestionResult]
    scores: Scores
    record: dict[str, Any]
    output_dir: Path
    mlflow_run_id: str | None


def _fits_check(lm: models.LoadedModel, reserve: int) -> Callable[[str], bool]:
    limit = lm.info.max_length - reserve

    def fits(text: str) -> bool:
        # A token covers at least one UTF-8 byte: short texts fit without tokenizing them.
        if len(text.encode()) + 1 <= limit:
            return True
        return len(lm.encode(text)) <= limit

    return fits


def _to_results(
    batch: Sequence[prompts.Prompt], scores: Sequence[Score], calibration: str
) -> list[QuestionResult]:
    predictions: list[int | None] = [s.prediction for s in scores]
    margins: list[float | None] = [None] * len(scores)
    if scores and scores[0].logprobs is not None:
        matrix = np.array([s.logprobs for s in scores], dtype=np.float64)
        if calibration == "mean":
            matrix = matrix - matrix.mean(axis=0, keepdims=True)
        predictions = [int(p) for p in calibrated_predictions(matrix, "none")]
        top2 = np.sort(matrix, axis=1)[:, -2:]
        margins = [float(m) for m in top2[:, 1] - top2[:, 0]]
    return [
        QuestionResult(
            subject=p.question.subject,
            index=p.question.index,
            prompt_hash=p.sha,
            shots_used=p.shots_used,
            n_tokens=s.n_tokens,
            truncated=s.truncated,
            logprobs=s.logprobs,
            generated=s.generated,
            prediction=pred,
            gold=p.question.answer,
            margin=margin,
        )
        for p, s, pred, margin in zip(batch, scores, predictions, margins, strict=True)
    ]


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # never a half-written results.json


def _own_folder(output_dir: Path, run_id: str) -> Path:
    """`output_dir`, or a subfolder of it when another run's results are already there."""
    output_dir.mkdir(parents=True, exist_ok=True)
    existing = output_dir / RESULTS_FILE
    if existing.is_file():
        try:
            other = json.loads(existing.read_text(encoding="utf-8")).get("run_id")
        except (OSError, ValueError):
            other = None
        if other != run_id:
            output_dir = output_dir / f"run-{run_id[:12]}"
            output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


def _identity(cfg: EvalConfig, info: models.ModelInfo, data_fp: str) -> str:
    """Hash of everything that determines a run's results: settings, weights, questions, template."""
    # The dtype actually used: `auto` means fp32 on a CPU and bf16 on a GPU, different results.
    ident = {
        "config": {**identity_dict(cfg), "dtype": info.dtype},
        "weights": [info.location, info.revision, info.weights_sha256],
        "data": data_fp,
        "template": prompts.template_hash(cfg.formulation),
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


class TruncationError(ValueError):
    """Prompts do not fit the context even with no shots, and truncation was not allowed."""


def _render(
    cfg: EvalConfig,
    plan: _Plan,
    lm: models.LoadedModel,
    fits: Callable[[str], bool],
) -> dict[str, list[prompts.Prompt]]:
    """Every subject's prompts, shots dropped until each fits; refuse any that never fits."""
    out = {
        s: [prompts.fit(cfg.formulation, plan.shots[s], q, fits) for q in qs]
        for s, qs in plan.questions.items()
    }
    too_long = [p for ps in out.values() for p in ps if p.shots_used == 0 and not fits(p.text)]
    if too_long and not cfg.allow_truncation:
        longest = max(too_long, key=lambda p: len(p.text))
        n_tokens = len(lm.encode(longest.text))
        raise TruncationError(
            f"{len(too_long)} of {sum(map(len, out.values()))} prompts do not fit the model's context "
            f"({lm.info.max_length} tokens) even with 0 shots, e.g. {longest.question.subject} question "
            f"{longest.question.index} ({n_tokens} tokens); raise max_length, or set allow_truncation=true "
            "to score their last tokens"
        )
    return out


@dataclass(frozen=True)
class _Plan:
    questions: dict[str, tuple[Question, ...]]  # per subject, the test questions to score
    shots: dict[str, tuple[Question, ...]]
    fingerprint: str
    dev_fingerprint: str

    @property
    def all_questions(self) -> list[Question]:
        return [q for qs in self.questions.values() for q in qs]


def _plan(cfg: EvalConfig) -> _Plan:
    data = load_subjects(cfg.data, cfg.subjects)
    chosen = {s: subsample(d.test, cfg.limit, cfg.seed) for s, d in data.items()}
    shots = {s: prompts.select_shots(d.dev, cfg.k, cfg.shot_selection, cfg.seed) for s, d in data.items()}
    return _Plan(
        questions=chosen,
        shots=shots,
        fingerprint=fingerprint(q for qs in chosen.values() for q in qs),
        dev_fingerprint=fingerprint(q for s in shots.values() for q in s),
    )


def run(
    cfg: EvalConfig,
    output_dir: Path,
    *,
    progress: bool = True,
    echo: Echo = print,
    sweep: str | None = None,
) -> RunOutput:
    """Evaluate `cfg.model`, record the run in the SQL store and MLflow, write files to `output_dir`."""
    from mmlu_track.store.sql import SqlStore

    store = SqlStore(cfg.tracking.db_url)  # fail before any work when the database is unusable
    try:
        return _run(cfg, output_dir, store, progress=progress, echo=echo, sweep=sweep)
    finally:
        store.close()


def _run(
    cfg: EvalConfig, output_dir: Path, store: SqlStore, *, progress: bool, echo: Echo, sweep: str | None
) -> RunOutput:
    from tqdm import tqdm

    from mmlu_track.store.sql import RunMeta, StoreError

    started = time.time()
    seeds = provenance.set_seeds(cfg.seed)
    plan = _plan(cfg)
    questions = plan.all_questions
    t_load = time.time()
    lm = models.load(cfg)
    loaded = time.time()
    fits = _fits_check(lm, cfg.scoring.max_new_tokens if cfg.scoring.method == "generate" else 1)
    rendered_all = _render(cfg, plan, lm, fits)  # refuses before the run is recorded
    git = provenance.git_commit()
    identity = _identity(cfg, lm.info, plan.fingerprint)
    meta = RunMeta(
        # resume=false: a fresh identity of the same length (the column holds 64 characters)
        identity=identity
        if cfg.tracking.resume
        else hashlib.sha256(f"{identity}-{time.time_ns()}".encode()).hexdigest(),
        model_name=lm.info.name,
        model_revision=lm.info.revision or lm.info.weights_sha256,
        scoring=cfg.scoring.method,
        formulation=cfg.formulation,
        k=cfg.k,
        data_fingerprint=plan.fingerprint,
        template_hash=prompts.template_hash(cfg.formulation),
        git_commit=git,
        config=to_dict(cfg),
        n_questions=len(questions),
        output_dir=str(output_dir),
        sweep=sweep,
    )
    run_id, done = store.start_or_resume(meta)
    if done:
        left = len(plan.questions) - len(done)
        echo(f"resuming run {run_id}: {len(done)} subjects already done, {left} to go")
    scorer = SCORERS[cfg.scoring.method]

    results: list[QuestionResult] = []
    multi_pass = prefix_fallbacks = forwarded = 0
    try:
        with tqdm(total=len(questions), desc="MMLU", unit="q", disable=not progress, file=sys.stderr) as bar:
            for subject, qs in plan.questions.items():
                if len(done.get(subject, ())) == len(qs):
                    results.extend(done[subject])
                    bar.update(len(qs))
                    continue
                bar.set_postfix_str(subject)
                rendered = rendered_all[subject]
                scores = scorer(
                    lm,
                    [p.text for p in rendered],
                    cfg.scoring,
                    cfg.batch_size,
                    bar.update,
                    prefixes=[p.prefix for p in rendered],
                    max_tokens=cfg.batch_tokens,
                )
                multi_pass += sum(s.multi_pass for s in scores)
                prefix_fallbacks += sum(s.prefix_fallback for s in scores)
                forwarded += sum(s.forwarded for s in scores)
                subject_results = _to_results(rendered, scores, cfg.scoring.calibration)
                store.save_subject(run_id, subject, subject_results)
                results.extend(subject_results)
    except BaseException as err:
        with contextlib.suppress(StoreError):  # the database itself may be what failed
            store.mark(run_id, "failed")  # still resumable: its committed subjects are kept
        if isinstance(err, StoreError):
            raise StoreError(
                f"{err}; the subjects committed so far are kept: run the same command to resume"
            ) from err
        raise
    finished = time.time()
    if truncated := sum(r.truncated for r in results):
        echo(f"warning: {truncated} prompts were truncated to their last tokens (allow_truncation=true)")

    agg = aggregate(results)
    first = questions[0]
    record: dict[str, Any] = {
        "schema_version": 1,
        "run_id": run_id,
        "config": to_dict(cfg),
        "model": asdict(lm.info),
        "data": {
            "source": cfg.data.source,
            "path": cfg.data.path,
            "fingerprint": plan.fingerprint,
            "dev_fingerprint": plan.dev_fingerprint,
            "n_questions": len(questions),
        },
        "prompt": {
            "formulation": cfg.formulation,
            "template_hash": meta.template_hash,
            "k": cfg.k,
            "shots_used": dict(sorted(Counter(r.shots_used for r in results).items())),
            "truncated": sum(r.truncated for r in results),
            "example": prompts.fit(cfg.formulation, plan.shots[first.subject], first, fits).text,
        },
        "scoring": {
            **to_dict(cfg.scoring),
            "multi_pass": multi_pass,
            "prefix_fallbacks": prefix_fallbacks,
            "invalid": agg.invalid,
        },
        "seeds": seeds,
        "versions": provenance.versions(),
        "git_commit": git,
        "host": provenance.host(),
        "timing": {
            "data_s": round(t_load - started, 3),
            "model_load_s": round(loaded - t_load, 3),
            "scoring_s": round(finished - loaded, 3),
            "questions_per_s": round(
                (len(questions) - sum(map(len, done.values()))) / max(finished - loaded, 1e-9), 3
            ),
            "resumed_subjects": len(done),
            "tokens_forwarded": forwarded,
            "total_s": round(time.time() - started, 3),
        },
        "scores": agg.to_json(),
    }
    output_dir = _own_folder(output_dir, run_id)
    write_jsonl(output_dir / PREDICTIONS_FILE, results)
    _write_json(output_dir / RESULTS_FILE, record)
    store.finish(run_id, record, str(output_dir))
    echo(table(agg))
    resumed = sum(map(len, done.values()))
    scored = (
        f"{len(questions)} questions" if not resumed else f"{len(questions) - resumed} questions scored now"
    )
    echo(
        f"{scored} in {finished - loaded:.1f} s ({record['timing']['questions_per_s']:.2f} q/s)"
        f"{f', {resumed} resumed from the store' if resumed else ''}; results in {output_dir}; run {run_id}"
    )
    mlflow_id = None
    if cfg.tracking.mlflow:
        mlflow_id = log_to_mlflow(
            store,
            run_id,
            record=record,
            results=results,
            uri=cfg.tracking.mlflow_uri,
            experiment=cfg.tracking.experiment,
            sweep=sweep,
            echo=echo,
        )
    return RunOutput(run_id, results, agg, record, output_dir, mlflow_id)


def log_to_mlflow(
    store: SqlStore,
    run_id: str,
    *,
    record: dict[str, Any],
    results: Sequence[QuestionResult],
    uri: str | None,
    experiment: str,
    sweep: str | None,
    echo: Echo,
) -> str | None:
    """Log to MLflow and store the MLflow run id; on failure warn and leave the run unsynced."""
    from mmlu_track.store.mlflow import MlflowUnavailable, log_run

    try:
        mlflow_id = log_run(record, results, uri=uri, experiment=experiment, run_id=run_id, sweep=sweep)
    except MlflowUnavailable as err:
        print(
            f"mmlu_track: warning: {err}. The run is saved in the SQL store ({store.url}); "
            f"log it to MLflow later with: python -m mmlu_track.runs --db '{store.url}' sync"
            + (f" --mlflow-uri '{uri}'" if uri else ""),
            file=sys.stderr,
        )
        return None
    store.set_mlflow_run(run_id, mlflow_id)
    echo(f"MLflow run {mlflow_id} (experiment {experiment!r})")
    return mlflow_id
