"""Reaching an MLflow tracking store: bounded HTTP retries, the default URI, a SQLite store's first
use and its artifacts' folder, a server's health, and MLflow's printed links without passwords."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import mmlu_track.store.mlflow.views as mlflow_views
from mmlu_track.store.locations import missing_folder, mlflow_uri, sqlite_path
from mmlu_track.store.mlflow.views import Kind
from mmlu_track.support.credentials import redact, redact_text
from mmlu_track.support.errors import MmluTrackError


class MlflowUnavailable(MmluTrackError):
    """The MLflow tracking store cannot be reached or used (the SQL store is unaffected)."""


# An unhealthy server must cost seconds, not MLflow's default of minutes of retries (only where the
# user has not set these MLflow environment settings).
HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}


@contextlib.contextmanager
def _first_use_lock(uri: str | None) -> Iterator[None]:
    """Serialise first use of a SQLite MLflow store: MLflow creates its tables on first use, and
    processes starting together race on it ("table ... already exists")."""
    path = sqlite_path(mlflow_uri(uri))
    if path is None:
        yield
        return
    import fcntl

    if why := missing_folder(mlflow_uri(uri)):
        raise MlflowUnavailable(why)
    name = f"{path}.lock"
    while True:  # the holder removes the file as it leaves: a lock taken on a removed file is taken again
        lock = open(name, "a")  # noqa: SIM115 (closed below, after the file is removed)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            same = os.path.samestat(os.fstat(lock.fileno()), os.stat(name))
        except FileNotFoundError:
            same = False
        if same:
            break
        lock.close()
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)  # nothing left beside the store; a waiter finds it gone and opens anew
        lock.close()  # releases the lock


def failures() -> tuple[type[BaseException], ...]:
    """What a call into MLflow raises for a tracking store it cannot use: MLflow's own errors (a
    server's answer, its retries given up), the HTTP layer's and the file system's (`OSError`, which
    `requests`' errors are), a database store's (SQLAlchemy's, sqlite3's), and ours for a store that
    does not answer. Anything else raised around such a call is a bug, never "not logged"."""
    import sqlite3

    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    return (MlflowException, OSError, SQLAlchemyError, sqlite3.Error, MlflowUnavailable)


def connect(uri: str | None) -> Any:
    """The one way the room reaches a tracking store: a server is first asked whether it answers
    (`check_reachable`: seconds, not MLflow's minutes of retries), then an MlflowClient of the
    resolved URI with bounded HTTP retries (`HTTP_LIMITS`) is made. Raises `MlflowUnavailable`."""
    check_reachable(uri)
    return _client(uri)


def _client(uri: str | None) -> Any:
    """An MlflowClient of the resolved URI, with bounded HTTP retries."""
    for key, value in HTTP_LIMITS.items():
        os.environ.setdefault(key, value)
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=mlflow_uri(uri))


def client_and_experiment(
    uri: str | None, experiment: str, view: Kind | None = None, name: str = ""
) -> tuple[Any, str]:
    """An MlflowClient with bounded HTTP retries, and the experiment's id (created if missing), marked
    a machine-learning experiment (where MLflow reads the kind: 3.17 reads the link's `workflowType`),
    with mmlu_track's saved runs-table `view` of that kind (`mlflow_views`) where it is missing, old,
    or too narrow for the run `name` about to be logged."""
    with _first_use_lock(uri), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = connect(uri)
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else client.create_experiment(experiment, _artifacts(uri))
        kind = mlflow_views.EXPERIMENT_KIND_TAG
        if kind not in (exp.tags if exp else {}):  # a kind the user chose is kept
            with contextlib.suppress(*failures()):
                client.set_experiment_tag(exp_id, kind, mlflow_views.EXPERIMENT_KIND)
        current = exp.tags.get(mlflow_views.VIEW_TAG) if exp else None
        if view and mlflow_views.needs_writing(current, px := mlflow_views.name_width(name)):
            # A view is a convenience: a store refusing experiment tags costs no logging.
            widest = max(px, mlflow_views.name_column(current))  # never narrowed
            with contextlib.suppress(*failures()):
                client.set_experiment_tag(
                    exp_id, mlflow_views.VIEW_TAG, mlflow_views.envelope(view, name_px=widest)
                )
    return client, str(exp_id)


def _artifacts(uri: str | None) -> str | None:
    """A new experiment's artifacts in a SQLite MLflow store: `mlruns/` beside the file (MLflow's is
    the working directory's: a job's own folder under `hydra.job.chdir=true`); else MLflow's."""
    path = sqlite_path(mlflow_uri(uri))
    return (path.parent / "mlruns").as_uri() if path is not None and path.is_absolute() else None


def check_reachable(uri: str | None, timeout: float = 5.0) -> None:
    """Fail fast on an HTTP tracking server that does not answer (MLflow itself retries for minutes).

    Asked through MLflow's own HTTP layer, once: the same credentials (the URL's `user:password@`,
    `MLFLOW_TRACKING_USERNAME`/`_PASSWORD`, a token), TLS settings and proxies as its client."""
    if not (uri and uri.startswith(("http://", "https://"))):
        return
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    try:
        with quiet():
            creds = get_default_host_creds(uri.rstrip("/"))  # type: ignore[no-untyped-call]
            resp = http_request(  # type: ignore[no-untyped-call]
                creds, "/health", "GET", max_retries=0, backoff_factor=0, timeout=timeout,
                raise_on_status=False,
            )  # fmt: skip
    except failures() as err:  # MLflow wraps the connection error; its cause is the readable part
        reason = str(err.__cause__ or err).splitlines()[0]
        raise MlflowUnavailable(f"MLflow server {redact(uri)} is unreachable: {redact_text(reason)}") from err
    if resp.status_code != 200:
        raise MlflowUnavailable(
            f"MLflow server {redact(uri)} is unreachable: /health answered HTTP {resp.status_code}"
        )


# MLflow's own links, printed as a run ends ("🏃 View run NAME at: URI/#/..."): they carry the tracking
# URI's password, and open under MLflow 3.17's GenAI tabs; mmlu_track prints its own.
_MLFLOW_LINK = re.compile(r"^\W*View (run .* at|experiment at): ")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """MLflow's printing and warnings held back: what it prints passes, redacted, but its links."""
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            warnings.simplefilter("ignore")  # MLflow's own deprecation chatter is not the user's concern
            yield
    finally:
        kept = [line for line in printed.getvalue().splitlines(keepends=True) if not _MLFLOW_LINK.match(line)]
        sys.stdout.write(redact_text("".join(kept)))


def experiments_of(uri: str, run_ids: list[str]) -> dict[str, str]:
    """Each run's experiment id on the tracking store (the runs it knows); {} when it does not
    answer within seconds: a link is a convenience, never a wait."""
    try:
        client = connect(uri)
    except MlflowUnavailable:
        return {}
    found: dict[str, str] = {}
    with quiet():
        for rid in run_ids:
            with contextlib.suppress(*failures()):  # a run on another store: no link to its page
                found[rid] = str(client.get_run(rid).info.experiment_id)
    return found
