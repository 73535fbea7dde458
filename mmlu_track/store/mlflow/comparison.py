"""A comparison or a noise measurement as its own MLflow run, written from the typed record the gate
or the noise command hands in (`entries.ComparisonRun`, `entries.NoiseRun`): name, tags,
params, rounded metrics, report files, the paired questions' table, and a link from the candidate's
run. Raises `MlflowUnavailable`: the caller warns, and the verdict stands without MLflow.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmlu_track.store.locations import mlflow_uri
from mmlu_track.store.mlflow.client import MlflowUnavailable, client_and_experiment, failures, quiet
from mmlu_track.store.mlflow.entries import ComparisonRun, Logged, NoiseRun, Target
from mmlu_track.store.mlflow.live import GATE_TAG, KIND_TAG, metric_key
from mmlu_track.store.mlflow.pages import NOTE_TAG, gate_line, shown
from mmlu_track.store.mlflow.tables import PAIRED_TABLE, Columns, paired_columns
from mmlu_track.store.mlflow.views import ML_PAGES, RUN_COLOR_TAG, VERDICT_COLORS, page
from mmlu_track.support.credentials import redact, redact_text

NOISE_ID_TAG = "mmlu_track.noise_id"
VERDICT_TAG = "verdict"


@dataclass(frozen=True)
class _RunLog:
    """One comparison-like MLflow run as it is written: its name, tags, params, metrics and files.
    `candidate`: (the candidate's MLflow run id, a line) tagged on the candidate's run as
    `mmlu_track.gate` with this run's id, so its page leads to its latest verdict."""

    name: str
    tags: Mapping[str, str]
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    files: Sequence[Path]
    candidate: tuple[str, str] | None = None
    table: Columns | None = None  # the paired questions (`tables.paired_columns`)
    kind: str = "comparison"  # the run's mmlu_track.kind tag: comparison | noise (no runs-table view)


def log_comparison(run: ComparisonRun) -> Logged:
    """Log a comparison as its own MLflow run: the verdict as a tag and the colour of its dot, the
    description as the run page's text; linked from the candidate's run unless it is an analysis.
    Raises `MlflowUnavailable`."""
    paired = run.paired
    entry = _RunLog(
        name=run.name,
        tags={
            VERDICT_TAG: run.verdict,
            NOTE_TAG: run.description,
            RUN_COLOR_TAG: VERDICT_COLORS[run.verdict],  # the dot beside the name says the verdict
        },
        params=run.params,
        metrics=run.metrics,
        files=run.files,
        candidate=run.candidate if run.verdict != "analysis" else None,
        table=paired_columns(paired.baseline, paired.candidate, paired.metric, docs=paired.docs)
        if paired
        else None,
    )
    return _log(run.target, entry)


def log_noise(run: NoiseRun) -> Logged:
    """Log a noise measurement as its own MLflow run (kind `noise`), tagged with its id in the SQL
    store; each paired evaluation a param `run/<variant>`. Raises `MlflowUnavailable`."""
    entry = _RunLog(
        name=run.name,
        tags={NOTE_TAG: run.description, NOISE_ID_TAG: run.noise_id},
        params={metric_key("run", name): run_id for name, run_id in run.runs.items()},
        metrics={metric_key(*key.split("/")): value for key, value in run.metrics.items()},
        files=run.files,
        kind="noise",
    )
    return _log(run.target, entry)


def _log(target: Target, entry: _RunLog) -> Logged:
    """Write `entry` as a new run in the target's experiment; its id and page."""
    uri = target.uri
    problem = failures()
    try:
        client, exp_id = client_and_experiment(
            uri, target.experiment, "comparisons" if entry.kind == "comparison" else None
        )
        with quiet():
            rid = _write(client, exp_id, entry)
            if entry.candidate:
                _link_candidate(client, entry.candidate, rid, f"#/experiments/{exp_id}/runs/{rid}?{ML_PAGES}")
    except problem as err:
        if isinstance(err, MlflowUnavailable):
            raise
        raise MlflowUnavailable(
            f"logging to MLflow ({redact(uri or 'default')}) failed: {redact_text(str(err).splitlines()[0])}"
        ) from err
    return Logged(rid, page(mlflow_uri(uri), exp_id, rid))


def _write(c: Any, exp_id: str, entry: _RunLog) -> str:
    """The run itself, terminated; its id."""
    from mlflow.entities import Metric, Param

    run = c.create_run(exp_id, run_name=entry.name, tags={KIND_TAG: entry.kind, **entry.tags})
    rid, ts = str(run.info.run_id), int(run.info.start_time)
    c.log_batch(
        rid,
        metrics=[Metric(k, shown(k, float(v)), ts, 0) for k, v in entry.metrics.items()],
        params=[Param(k, v) for k, v in entry.params.items()],
    )
    for path in entry.files:
        c.log_artifact(rid, str(path))
    if entry.table:
        c.log_table(rid, data=entry.table, artifact_file=PAIRED_TABLE)
    c.set_terminated(rid)
    return rid


def _link_candidate(c: Any, candidate: tuple[str, str], rid: str, link: str) -> None:
    """The candidate's run names this verdict (tag and description line); a candidate run on
    another server, not reachable here, is left as it is."""
    from mlflow.exceptions import MlflowException

    run_id, line = candidate
    with contextlib.suppress(MlflowException):
        c.set_tag(run_id, GATE_TAG, f"{line} (comparison run {rid})")
        note = c.get_run(run_id).data.tags.get(NOTE_TAG, "")
        c.set_tag(run_id, NOTE_TAG, gate_line(note, line, link))
