"""One evaluation, stage by stage: config -> data -> prompts -> scoring -> results -> files.

No Hydra here: `run` takes a validated `EvalConfig` and the folder to write into.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmlu_track import models, prompts, provenance
from mmlu_track.config import EvalConfig, to_dict
from mmlu_track.data import Question, fingerprint, load_subjects, subsample
from mmlu_track.results import QuestionResult, Scores, aggregate, table, write_jsonl
from mmlu_track.scoring import SCORERS, Score, calibrated_predictions

RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.jsonl"


@dataclass(frozen=True)
class RunOutput:
    results: list[QuestionResult]
    scores: Scores
    record: dict[str, Any]
    output_dir: Path


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


def run(
    cfg: EvalConfig, output_dir: Path, *, progress: bool = True, echo: Callable[[str], None] = print
) -> RunOutput:
    """Evaluate `cfg.model` on the configured MMLU subjects and write results into `output_dir`."""
    from tqdm import tqdm

    started = time.time()
    seeds = provenance.set_seeds(cfg.seed)
    data = load_subjects(cfg.data, cfg.subjects)
    chosen = {s: subsample(d.test, cfg.limit, cfg.seed) for s, d in data.items()}
    shots = {s: prompts.select_shots(d.dev, cfg.k, cfg.shot_selection, cfg.seed) for s, d in data.items()}
    questions: list[Question] = [q for qs in chosen.values() for q in qs]
    t_load = time.time()
    lm = models.load(cfg)
    loaded = time.time()
    scorer = SCORERS[cfg.scoring.method]
    reserve = cfg.scoring.max_new_tokens if cfg.scoring.method == "generate" else 1
    fits = _fits_check(lm, reserve)

    results: list[QuestionResult] = []
    example = ""
    multi_pass = 0
    with tqdm(total=len(questions), desc="MMLU", unit="q", disable=not progress, file=sys.stderr) as bar:
        for subject, qs in chosen.items():
            bar.set_postfix_str(subject)
            rendered = [prompts.fit(cfg.formulation, shots[subject], q, fits) for q in qs]
            example = example or rendered[0].text
            scores = scorer(lm, [p.text for p in rendered], cfg.scoring, cfg.batch_size, bar.update)
            multi_pass += sum(s.multi_pass for s in scores)
            results.extend(_to_results(rendered, scores, cfg.scoring.calibration))
    finished = time.time()

    agg = aggregate(results)
    record: dict[str, Any] = {
        "schema_version": 1,
        "config": to_dict(cfg),
        "model": asdict(lm.info),
        "data": {
            "source": cfg.data.source,
            "path": cfg.data.path,
            "fingerprint": fingerprint(questions),
            "dev_fingerprint": fingerprint(q for s in shots.values() for q in s),
            "n_questions": len(questions),
        },
        "prompt": {
            "formulation": cfg.formulation,
            "template_hash": prompts.template_hash(cfg.formulation),
            "k": cfg.k,
            "shots_used": dict(sorted(Counter(r.shots_used for r in results).items())),
            "truncated": sum(r.truncated for r in results),
            "example": example,
        },
        "scoring": {**to_dict(cfg.scoring), "multi_pass": multi_pass, "invalid": agg.invalid},
        "seeds": seeds,
        "versions": provenance.versions(),
        "git_commit": provenance.git_commit(),
        "host": provenance.host(),
        "timing": {
            "data_s": round(t_load - started, 3),
            "model_load_s": round(loaded - t_load, 3),
            "scoring_s": round(finished - loaded, 3),
            "questions_per_s": round(len(questions) / max(finished - loaded, 1e-9), 3),
            "total_s": round(time.time() - started, 3),
        },
        "scores": agg.to_json(),
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(output_dir / PREDICTIONS_FILE, results)
    _write_json(output_dir / RESULTS_FILE, record)
    echo(table(agg))
    echo(
        f"{len(questions)} questions in {finished - loaded:.1f} s "
        f"({record['timing']['questions_per_s']:.2f} q/s); results in {output_dir}"
    )
    return RunOutput(results=results, scores=agg, record=record, output_dir=output_dir)
