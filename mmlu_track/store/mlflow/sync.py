"""Which MLflow a run belongs to, and logging a finished run there in one go.

A run records into one MLflow URI, fixed when it starts (`locations.mlflow_uri`), never "whatever
MLflow's default is" in the shell that syncs it later. An evaluation whose MLflow failed makes one
last try (`RunRecorder.mirror_finished`) and otherwise warns with the command that logs it later;
`python -m mmlu_track.runs sync` sends each run there (`uri_for_sync`: the stored URI has `***`
for its password, refilled from this process's environment) with `log_run`, which reuses the run's
MLflow id where it exists. The SQL store marks a run synced only when everything went in.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mmlu_track.records.results import Docs, QuestionResult
from mmlu_track.records.run import RunRecord
from mmlu_track.store.mlflow.client import MlflowUnavailable
from mmlu_track.store.mlflow.live import LiveRun
from mmlu_track.support.credentials import is_redacted, refill, strip_userinfo

if TYPE_CHECKING:
    pass


def uri_for_sync(recorded: str | None) -> str | None:
    """A recorded URI made usable again: a stored URI has `***` for its password, which comes back
    from `MLFLOW_TRACKING_URI` (the same URI, with it) or, through MLflow's own
    `MLFLOW_TRACKING_USERNAME`/`MLFLOW_TRACKING_PASSWORD`, from the environment; else one line
    (`MlflowUnavailable`) saying how to give it."""
    if recorded is None or not is_redacted(recorded):
        return recorded
    if full := refill(recorded, [os.environ.get("MLFLOW_TRACKING_URI")]):
        return full
    if os.environ.get("MLFLOW_TRACKING_USERNAME") and os.environ.get("MLFLOW_TRACKING_PASSWORD"):
        return strip_userinfo(recorded)  # else the URL's `***` would be sent instead of them
    raise MlflowUnavailable(
        f"the MLflow URI {recorded} was recorded without its password: give it with --mlflow-uri URL, "
        "or set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
    )


def log_run(
    record: RunRecord,
    results: Sequence[QuestionResult],
    *,
    uri: str | None,
    experiment: str,
    existing: str | None,
    docs: Docs | None = None,
) -> str:
    """Log a finished run in one go (`runs sync`); its MLflow id. Raises `MlflowUnavailable`."""
    errors: list[str] = []
    live = LiveRun(uri, experiment, errors.append, then="")
    live.open(record.run_id, record.start, existing)
    if not live.finish(record, results, docs) or live.id is None:  # finished: opened, so with an id
        raise MlflowUnavailable(errors[0] if errors else "logging to MLflow failed")
    return live.id
