"""A comparison (or a noise measurement) as its own MLflow run: `ComparisonLog` says what goes in,
`log_comparison` logs it in one call (name, tags, params, rounded metrics, report files, the
paired questions' table) and points the candidate's run at it. Raises `MlflowUnavailable`: the
caller warns, and the verdict stands without MLflow.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mmlu_track.store.locations import mlflow_uri
from mmlu_track.store.mlflow import GATE_TAG, KIND_TAG
from mmlu_track.store.mlflow_client import MlflowUnavailable, check_reachable, client_and_experiment, quiet
from mmlu_track.store.mlflow_pages import NOTE_TAG, gate_line, shown
from mmlu_track.store.mlflow_tables import PAIRED_TABLE, Columns
from mmlu_track.store.mlflow_views import ML_PAGES, page
from mmlu_track.support.credentials import redact, redact_text


@dataclass(frozen=True)
class ComparisonLog:
    """A comparison of two runs as its MLflow run: its name, tags, params, metrics and files.
    `candidate`: (the candidate's MLflow run id, a line): tagged on the candidate's run as
    `mmlu_track.gate` with this comparison's id, so its page leads to its latest verdict."""

    name: str
    tags: Mapping[str, str]
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    files: Sequence[Path]
    candidate: tuple[str, str] | None = None
    table: Columns | None = None  # the paired questions (`mlflow_tables.paired_columns`)
    kind: str = "comparison"  # the run's mmlu_track.kind tag: comparison | noise (no runs-table view)


@dataclass(frozen=True)
class Logged:
    """A comparison's MLflow run: its id, and its page where the store has a UI."""

    id: str
    url: str | None


def log_comparison(uri: str | None, experiment: str, entry: ComparisonLog) -> Logged:
    """Log a comparison as its own MLflow run in `experiment`. Raises `MlflowUnavailable`."""
    name, run_tags, run_params, run_metrics = entry.name, entry.tags, entry.params, entry.metrics
    files, candidate = entry.files, entry.candidate
    check_reachable(uri)
    try:
        from mlflow.entities import Metric, Param

        client, exp_id = client_and_experiment(
            uri, experiment, "comparisons" if entry.kind == "comparison" else None
        )
        with quiet():
            run = client.create_run(exp_id, run_name=name, tags={KIND_TAG: entry.kind, **run_tags})
            rid = run.info.run_id
            ts = int(run.info.start_time)
            client.log_batch(
                rid,
                metrics=[Metric(k, shown(k, float(v)), ts, 0) for k, v in run_metrics.items()],
                params=[Param(k, v) for k, v in run_params.items()],
            )
            for path in files:
                client.log_artifact(rid, str(path))
            if entry.table:
                client.log_table(rid, data=entry.table, artifact_file=PAIRED_TABLE)
            client.set_terminated(rid)
            if candidate:
                from mlflow.exceptions import MlflowException

                with contextlib.suppress(MlflowException):  # a run on another server: not reachable here
                    client.set_tag(candidate[0], GATE_TAG, f"{candidate[1]} (comparison run {rid})")
                    note = client.get_run(candidate[0]).data.tags.get(NOTE_TAG, "")
                    client.set_tag(
                        candidate[0],
                        NOTE_TAG,
                        gate_line(note, candidate[1], f"#/experiments/{exp_id}/runs/{rid}?{ML_PAGES}"),
                    )
        return Logged(str(rid), page(mlflow_uri(uri), exp_id, str(rid)))
    except Exception as err:
        raise MlflowUnavailable(
            f"logging to MLflow ({redact(uri or 'default')}) failed: {redact_text(str(err).splitlines()[0])}"
        ) from err
