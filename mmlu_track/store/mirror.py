"""Save to the SQL store, then mirror to MLflow: the one sequence of every command that records.

The SQL store is the source of truth: a record is saved there first, and a failure there is the
command's error. MLflow then gets its copy; a tracking store that cannot be used costs one warning
saying where the record is kept (never the record, never the verdict), and a copy that went in is
linked from the record's row. The evaluation (`RunRecorder.mirror_finished`), the gate
(`SqlStore.comparisons.record`) and the noise command (`SqlStore.noise.record`) all go through here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from mmlu_track.support.console import warn

Logged = TypeVar("Logged")  # what the MLflow side answers: a `store.mlflow.Logged`, a run id


def save_then_mirror(
    save: Callable[[], None],
    mirror: Callable[[], Logged] | None,
    link: Callable[[Logged], None],
    kept: str,
) -> Logged | None:
    """`save` the record in the SQL store (raises as the store does), then, unless `mirror` is None
    (tracking.mlflow=false), `mirror` it to MLflow and `link` its MLflow run into the row; the MLflow
    run, or None. An unusable tracking store warns `<why><kept>` and returns None."""
    save()
    return mirrored(mirror, link, kept) if mirror is not None else None


def mirrored(mirror: Callable[[], Logged], link: Callable[[Logged], None], kept: str) -> Logged | None:
    """A record already in the SQL store, mirrored to MLflow (`save_then_mirror`'s second half)."""
    from mmlu_track.store.mlflow import MlflowUnavailable

    try:
        logged = mirror()
    except MlflowUnavailable as err:
        warn(f"{err}{kept}")
        return None
    link(logged)
    return logged
