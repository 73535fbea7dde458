"""MLflow, driven from here only: live evaluation runs, their later sync, comparisons, promotion.

An evaluation's MLflow run opens when scoring starts (`LiveRun.open`: params and tags from the
`RunStart`), takes each subject's accuracy as that subject is committed (`subject_done`: a run a
user can watch in the UI), and ends FINISHED with every metric and artifact (`finish`), or
FAILED / KILLED (`end`). A resumed evaluation reopens the same MLflow run.

MLflow being unreachable costs nothing: the first failure is one warning, later calls are
skipped, the SQL store keeps the run, and `python -m mmlu_track.runs sync` logs it when MLflow is
back (`mlflow_sync`). A URI may carry credentials (`http://user:password@host`): they reach the
server as MLflow's own client sends them, and no message carries the password.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from mmlu_track.config import to_dict
from mmlu_track.credentials import redact, redact_text
from mmlu_track.records.results import Accuracy, Docs, QuestionResult, write_jsonl
from mmlu_track.records.run import EarlyStop, RunRecord, RunStart
from mmlu_track.store.mlflow_pages import NOTE_TAG, dataset_input, description, percent
from mmlu_track.typed import flatten

SWEEP_TAG = "mmlu_track.sweep"
RUN_ID_TAG = "mmlu_track.run_id"
KIND_TAG = "mmlu_track.kind"
GATE_TAG = "mmlu_track.gate"  # on a candidate's run: its latest comparison's verdict and run id
# Tags of a run the sequential gate stopped: a resume to completion deletes them, and the run's name
# says it in the runs table. Its accuracy so far goes under `stopped/` (MLflow cannot delete a
# metric: a resumed run keeps them, apart from the full run's `acc_micro`).
EARLY_STOP_TAGS = ("mmlu_track.early_stop", "mmlu_track.early_stop_reason")
Warn = Callable[[str], None]


class MlflowUnavailable(RuntimeError):
    pass


def metric_key(*parts: str) -> str:
    """MLflow keys allow letters, digits, `_-./` and spaces: `other (business, ...)` -> `other`."""
    cleaned = [
        re.sub(r"[^A-Za-z0-9_\-. ]", "", re.sub(r"\s*\(.*\)", "", p)).strip().replace(" ", "_") for p in parts
    ]
    return "/".join(cleaned)


def subject_metrics(subject: str, acc: Accuracy) -> dict[str, float]:
    out = {metric_key("acc", subject): acc.acc}
    if acc.stderr is not None:
        out[metric_key("stderr", subject)] = acc.stderr
    return out


def metrics(record: RunRecord) -> dict[str, float]:
    scores = record.scores
    out: dict[str, float] = {
        "acc_micro": scores.micro.acc,
        "acc_macro": scores.macro.acc,
        "invalid": float(scores.invalid),
        "n_questions": float(scores.micro.n),
        "questions_per_s": record.timing.questions_per_s,
    }
    if scores.micro.stderr is not None:
        out["stderr_micro"] = scores.micro.stderr
    if scores.macro.stderr is not None:
        out["stderr_macro"] = scores.macro.stderr
    for subject, a in scores.subjects.items():
        out.update(subject_metrics(subject, a))
    for group, table in (("category", scores.categories), ("subcategory", scores.subcategories)):
        for name, a in table.items():
            out[metric_key("acc", group, name)] = a.acc
            if a.stderr is not None:
                out[metric_key("stderr", group, name)] = a.stderr
    return out


def params(start: RunStart) -> dict[str, str]:
    """Every setting of the run and every field of what it loaded, by dotted name: a field added
    to the settings (`config.py`), to `ModelInfo` or to `DataInfo` is a param with no edit here.
    `model.*`/`data.*` are what was loaded (the resolved revision), over what was asked for."""
    cfg = start.config
    settings = {k: v for k, v in to_dict(cfg).items() if k not in ("tracking", "gate", "subjects")}
    out: dict[str, object] = {
        **flatten(settings),
        **flatten({"model": dataclasses.asdict(start.model), "data": dataclasses.asdict(start.data)}),
        "dtype": start.model.dtype,  # resolved: `auto` is recorded as what it ran in
        "scoring": cfg.scoring.method,
        "subjects": "all" if len(cfg.subjects) == 57 else ",".join(cfg.subjects),
        "prompt.template_hash": start.template_hash,
        **{f"version.{k}": v for k, v in start.versions.items()},
    }
    out.pop("scoring.method")
    # An unset value (no revision for a local model, no limit) is left out, not logged as "None".
    return {k: str(v)[:6000] for k, v in out.items() if v is not None}


def tags(run_id: str, start: RunStart) -> dict[str, str]:
    out = {
        RUN_ID_TAG: run_id,
        KIND_TAG: "evaluation",
        "git_commit": start.git_commit or "unknown",
        "host": start.host.hostname,
        "device": start.model.device,
        "model": start.model.name,
    }
    if start.sweep:
        out[SWEEP_TAG] = start.sweep
    return out


# An unhealthy server must cost seconds, not MLflow's default of minutes of retries (only where the
# user has not set these MLflow environment settings).
HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}


def resolved_uri(uri: str | None) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"  # MLflow >= 3.7's default


@contextlib.contextmanager
def _first_use_lock(uri: str | None) -> Iterator[None]:
    """Serialise first use of a SQLite MLflow store: MLflow creates its tables on first use, and
    processes starting together race on it ("table ... already exists")."""
    resolved = resolved_uri(uri)
    if not resolved.startswith("sqlite:///"):
        yield
        return
    import fcntl

    path = Path(resolved.removeprefix("sqlite:///")).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def client_and_experiment(uri: str | None, experiment: str) -> tuple[Any, str]:
    """An MlflowClient with bounded HTTP retries, and the experiment's id (created if missing)."""
    for key, value in HTTP_LIMITS.items():
        os.environ.setdefault(key, value)
    from mlflow.tracking import MlflowClient

    with _first_use_lock(uri), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else client.create_experiment(experiment, _artifacts(uri))
    return client, str(exp_id)


def _artifacts(uri: str | None) -> str | None:
    """Where a new experiment of a SQLite MLflow store keeps its artifacts: `mlruns/` beside the
    database file (MLflow's `./mlruns` is the working directory's, and a sweep job's working
    directory is its own folder under `hydra.job.chdir=true`); elsewhere MLflow's choice."""
    resolved = resolved_uri(uri)
    path = resolved.removeprefix("sqlite:///")
    if not resolved.startswith("sqlite:///") or not Path(path).is_absolute():
        return None
    return (Path(path).parent / "mlruns").as_uri()


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
    except Exception as err:  # MLflow wraps the connection error; its cause is the readable part
        reason = str(err.__cause__ or err).splitlines()[0]
        raise MlflowUnavailable(f"MLflow server {redact(uri)} is unreachable: {redact_text(reason)}") from err
    if resp.status_code != 200:
        raise MlflowUnavailable(
            f"MLflow server {redact(uri)} is unreachable: /health answered HTTP {resp.status_code}"
        )


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    # MLflow prints its run links ("View run ... at: URI/#/...") with the tracking URI's password.
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            warnings.simplefilter("ignore")  # MLflow's own deprecation chatter is not the user's concern
            yield
    finally:
        sys.stdout.write(redact_text(printed.getvalue()))


class LiveRun:
    """One evaluation's MLflow run, kept in step with it. No method raises: the first failure is
    reported through `warn` and turns the rest into no-ops (`broken`)."""

    def __init__(
        self, uri: str | None, experiment: str, warn: Warn, then: str = "; the evaluation goes on without it"
    ) -> None:
        self.uri, self.experiment, self._warn, self._then = uri, experiment, warn, then
        self.client: Any = None
        self.id: str | None = None
        self.broken = False
        self._logged: set[str] = set()  # metric keys this process has logged

    def _call(self, what: str, fn: Callable[[], None]) -> bool:
        if self.broken:
            return False
        try:
            with quiet():
                fn()
        except Exception as err:  # MLflow raises many types for a broken store; all mean "not logged"
            self.broken = True
            self._warn(
                f"{what} in MLflow ({redact(self.uri or 'default')}) failed: "
                f"{redact_text(str(err).splitlines()[0])}{self._then}"
            )
            return False
        return True

    def open(
        self, run_id: str, start: RunStart, existing: str | None = None, started: datetime | None = None
    ) -> str | None:
        """Open (or reopen, for a resumed evaluation) the run, started at `started` (default now);
        its MLflow id, or None when down."""

        def go() -> None:
            check_reachable(self.uri)
            self.client, exp_id = client_and_experiment(self.uri, self.experiment)
            from mlflow.entities import Param, RunStatus, RunTag
            from mlflow.exceptions import MlflowException

            if existing:
                with contextlib.suppress(MlflowException):  # gone, or another server: a new run then
                    self.client.update_run(
                        existing, status=RunStatus.to_string(RunStatus.RUNNING), name=start.name
                    )  # the name back, if an early stop had changed it
                    self.id = existing
                    for tag in EARLY_STOP_TAGS:  # resumed after an early stop: no longer one
                        with contextlib.suppress(MlflowException):
                            self.client.delete_tag(existing, tag)
                    return
            new = self.client.create_run(
                exp_id,
                run_name=start.name,
                tags=tags(run_id, start),
                start_time=int(started.timestamp() * 1000) if started else None,
            )
            self.id = str(new.info.run_id)
            self.client.log_batch(
                self.id,
                params=[Param(k, v) for k, v in params(start).items()],
                tags=[RunTag(k, v) for k, v in tags(run_id, start).items()],
            )
            self.client.log_inputs(self.id, datasets=[dataset_input(start)])

        self._call("opening the run", go)
        return self.id if not self.broken else None

    def _log_metrics(self, values: Mapping[str, float], step: int = 0) -> None:
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self.client.log_batch(self.id, metrics=[Metric(k, float(v), ts, step) for k, v in values.items()])
        self._logged.update(values)

    def subject_done(self, subject: str, acc: Accuracy, subjects_done: int, so_far: Accuracy) -> None:
        """A subject's accuracy, and the running micro accuracy at step = subjects done."""
        if self.id is None:
            return
        self._call("logging a subject", lambda: self._log_metrics(subject_metrics(subject, acc)))
        progress = {"progress/acc_micro": so_far.acc, "progress/questions": float(so_far.n)}
        self._call("logging progress", lambda: self._log_metrics(progress, step=subjects_done))

    def finish(self, record: RunRecord, results: Sequence[QuestionResult], docs: Docs | None = None) -> bool:
        """Every metric not yet logged here, the artifacts, status FINISHED. True when all went in."""
        if self.id is None:
            return False

        def go() -> None:
            from mmlu_track.store.plots import subject_accuracy_png

            self._log_metrics({k: v for k, v in metrics(record).items() if k not in self._logged})
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp)
                doc = record.to_json()
                (out / "results.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False))
                write_jsonl(out / "predictions.jsonl", results, docs)
                (out / "config.json").write_text(json.dumps(doc["config"], indent=2))
                (out / "example_prompt.txt").write_text(record.start.example_prompt)
                subject_accuracy_png(record.scores, out / "subject_accuracy.png", record.start.name)
                self.client.log_artifacts(self.id, str(out))
            self.client.set_tag(self.id, NOTE_TAG, description(record))
            self.client.set_terminated(self.id, status="FINISHED")

        return self._call("logging the results", go)

    def stopped(self, stop: EarlyStop, so_far: Accuracy, name: str) -> None:
        """The sequential gate stopped the evaluation: FINISHED with its end time, its name starting
        with where it stopped, tags and the description saying where and why, its accuracy on the
        questions scored under `stopped/` (a part of the questions, never charted as a run's)."""
        if self.id is None:
            return

        def go() -> None:
            where = (
                f"{stop.verdict} at look {stop.look}/{stop.looks}, "
                f"{stop.questions_scored}/{stop.questions_total} q"
            )
            self.client.set_tag(self.id, EARLY_STOP_TAGS[0], where)
            self.client.set_tag(
                self.id,
                EARLY_STOP_TAGS[1],
                f"{stop.summary()}: {stop.reason}; gated against run {stop.baseline_run_id}; accuracy on "
                f"the questions scored {100 * so_far.acc:.2f} %",
            )
            self.client.set_tag(
                self.id,
                NOTE_TAG,
                f"**Stopped by the sequential gate: {stop.summary()}** ({where})\n\n{stop.reason}. Gated "
                f"against run {stop.baseline_run_id}. Accuracy on the {so_far.n:,} questions scored: "
                f"{percent(so_far)} (a part of the questions: not comparable with a full run's).",
            )
            # `stopped/`: never mixed with a full run's acc_micro in a chart across runs
            self._log_metrics({"stopped/acc_micro": so_far.acc, "stopped/questions": float(so_far.n)})
            self.client.update_run(self.id, name=f"stopped ({where}) {name}")
            self.client.set_terminated(self.id, status="FINISHED")  # with its end time: a duration

        self._call("ending the stopped run", go)

    def end(self, status: Literal["FAILED", "KILLED"]) -> None:
        if self.id is not None:
            self._call("ending the run", lambda: self.client.set_terminated(self.id, status=status))


def log_comparison(
    *,
    uri: str | None,
    experiment: str,
    name: str,
    run_tags: Mapping[str, str],
    run_params: Mapping[str, str],
    run_metrics: Mapping[str, float],
    files: Sequence[Path],
    candidate: tuple[str, str] | None = None,
) -> str:
    """Log a comparison of two runs as its own MLflow run; its id. Raises `MlflowUnavailable`.
    `candidate`: (the candidate's MLflow run id, a line): tagged on the candidate's run as
    `mmlu_track.gate` with this comparison's id, so its page leads to its latest verdict."""
    check_reachable(uri)
    try:
        from mlflow.entities import Metric, Param

        client, exp_id = client_and_experiment(uri, experiment)
        with quiet():
            run = client.create_run(exp_id, run_name=name, tags={KIND_TAG: "comparison", **run_tags})
            rid = run.info.run_id
            ts = int(run.info.start_time)
            client.log_batch(
                rid,
                metrics=[Metric(k, float(v), ts, 0) for k, v in run_metrics.items()],
                params=[Param(k, v) for k, v in run_params.items()],
            )
            for path in files:
                client.log_artifact(rid, str(path))
            client.set_terminated(rid)
            if candidate:
                from mlflow.exceptions import MlflowException

                with contextlib.suppress(MlflowException):  # a run on another server: not reachable here
                    client.set_tag(candidate[0], GATE_TAG, f"{candidate[1]} (comparison run {rid})")
        return str(rid)
    except Exception as err:
        raise MlflowUnavailable(
            f"logging to MLflow ({redact(uri or 'default')}) failed: {redact_text(str(err).splitlines()[0])}"
        ) from err
