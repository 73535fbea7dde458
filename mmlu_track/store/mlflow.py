"""Logging a finished run to MLflow (params, tags, metrics, artifacts) from its stored record.

Everything logged is rebuilt from the run's `results.json` record and its per-question results,
so a run saved while MLflow was unreachable can be logged later (`python -m mmlu_track.runs sync`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import urllib.request
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mmlu_track.eval.results import QuestionResult, Scores, write_jsonl

SWEEP_TAG = "mmlu_track.sweep"
RUN_ID_TAG = "mmlu_track.run_id"


class MlflowUnavailable(RuntimeError):
    pass


def metric_key(*parts: str) -> str:
    """MLflow keys allow letters, digits, `_-./` and spaces: `other (business, ...)` -> `other`."""
    cleaned = [
        re.sub(r"[^A-Za-z0-9_\-. ]", "", re.sub(r"\s*\(.*\)", "", p)).strip().replace(" ", "_") for p in parts
    ]
    return "/".join(cleaned)


def metrics(record: dict[str, Any]) -> dict[str, float]:
    scores = Scores.from_json(record["scores"])
    out: dict[str, float] = {
        "acc_micro": scores.micro.acc,
        "acc_macro": scores.macro.acc,
        "invalid": float(scores.invalid),
        "n_questions": float(scores.micro.n),
        "questions_per_s": float(record["timing"]["questions_per_s"]),
    }
    if scores.micro.stderr is not None:
        out["stderr_micro"] = scores.micro.stderr
    if scores.macro.stderr is not None:
        out["stderr_macro"] = scores.macro.stderr
    for group, table in (
        ("", scores.subjects),
        ("category", scores.categories),
        ("subcategory", scores.subcategories),
    ):
        for name, a in table.items():
            parts = (group, name) if group else (name,)
            out[metric_key("acc", *parts)] = a.acc
            if a.stderr is not None:
                out[metric_key("stderr", *parts)] = a.stderr
    return out


def params(record: dict[str, Any]) -> dict[str, str]:
    cfg = record["config"]
    model = record["model"]
    subjects = cfg["subjects"]
    out = {
        "model.name": model["name"],
        "model.source": model["source"],
        "model.location": model["location"],
        "model.revision": model["revision"],
        "model.weights_sha256": model["weights_sha256"],
        "model.add_bos": model["add_bos"],
        "model.max_length": model["max_length"],
        "dtype": model["dtype"],  # resolved: `auto` is recorded as what it ran in
        "scoring": cfg["scoring"]["method"],
        "scoring.calibration": cfg["scoring"]["calibration"],
        "scoring.max_new_tokens": cfg["scoring"]["max_new_tokens"],
        "formulation": cfg["formulation"],
        "k": cfg["k"],
        "shot_selection": cfg["shot_selection"],
        "seed": cfg["seed"],
        "limit": cfg["limit"],
        "subjects": "all" if len(subjects) == 57 else ",".join(subjects),
        "batch_size": cfg["batch_size"],
        "batch_tokens": cfg.get("batch_tokens"),
        "data.source": record["data"]["source"],
        "data.fingerprint": record["data"]["fingerprint"],
        "prompt.template_hash": record["prompt"]["template_hash"],
    }
    out.update({f"version.{k}": v for k, v in record["versions"].items()})
    # An unset value (no revision for a local model, no limit) is left out, not logged as "None".
    return {k: str(v)[:6000] for k, v in out.items() if v is not None}


# An unhealthy server must cost seconds, not MLflow's default of minutes of retries (only where the
# user has not set these MLflow environment settings).
HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}


def _resolved_uri(uri: str | None) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"  # MLflow >= 3.7's default


@contextlib.contextmanager
def _first_use_lock(uri: str | None) -> Iterator[None]:
    """Serialise first use of a SQLite MLflow store: MLflow creates its tables on first use, and
    processes starting together race on it ("table ... already exists")."""
    resolved = _resolved_uri(uri)
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
        exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    return client, str(exp_id)


def run_name(record: dict[str, Any]) -> str:
    """A name that tells runs apart: model, formulation, k, scoring, dtype, limit, seed when sampled."""
    cfg = record["config"]
    parts = [record["model"]["name"], cfg["formulation"], f"k{cfg['k']}", cfg["scoring"]["method"]]
    if cfg["scoring"].get("calibration", "none") != "none":
        parts.append(f"cal-{cfg['scoring']['calibration']}")
    parts.append(record["model"]["dtype"])
    if cfg.get("limit") is not None:
        parts += [f"limit{cfg['limit']}", f"seed{cfg['seed']}"]
    return "-".join(str(p) for p in parts)


def check_reachable(uri: str | None, timeout: float = 5.0) -> None:
    """Fail fast on an HTTP tracking server that does not answer (MLflow itself retries for minutes)."""
    if uri and uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout) as resp:
                resp.read()
        except OSError as err:
            raise MlflowUnavailable(f"MLflow server {uri} is unreachable: {err}") from err


def log_run(
    record: dict[str, Any],
    results: Sequence[QuestionResult],
    *,
    uri: str | None,
    experiment: str,
    run_id: str,
    sweep: str | None,
) -> str:
    """Log one finished run; return the MLflow run id. Raises `MlflowUnavailable` on failure."""
    check_reachable(uri)
    try:
        from mlflow.entities import Metric, Param, RunTag

        from mmlu_track.store.plots import subject_accuracy_png

        client, exp_id = client_and_experiment(uri, experiment)
        name = run_name(record)
        tags = {
            RUN_ID_TAG: run_id,
            "git_commit": record.get("git_commit") or "unknown",
            "host": record["host"]["hostname"],
            "device": record["model"]["device"],
            "model": record["model"]["name"],
        }
        if sweep:
            tags[SWEEP_TAG] = sweep
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # MLflow's own deprecation chatter is not the user's concern
            run = client.create_run(exp_id, run_name=name, tags=tags)
            rid = run.info.run_id
            ts = int(run.info.start_time)
            client.log_batch(
                rid,
                metrics=[Metric(k, v, ts, 0) for k, v in metrics(record).items()],
                params=[Param(k, v) for k, v in params(record).items()],
                tags=[RunTag(k, v) for k, v in tags.items()],
            )
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp)
                (out / "results.json").write_text(json.dumps(record, indent=2, ensure_ascii=False))
                write_jsonl(out / "predictions.jsonl", results)
                (out / "config.json").write_text(json.dumps(record["config"], indent=2))
                (out / "example_prompt.txt").write_text(record["prompt"]["example"])
                subject_accuracy_png(Scores.from_json(record["scores"]), out / "subject_accuracy.png", name)
                client.log_artifacts(rid, str(out))
            client.set_terminated(rid)
        return str(rid)
    except Exception as err:  # MLflow raises many types for a broken store; all mean "not logged"
        raise MlflowUnavailable(f"logging to MLflow ({uri or 'default'}) failed: {err}") from err


def promote(uri: str | None, model: str, alias: str, run_id: str, source: str) -> str:
    """Point `model@alias` at a new version referring to the evaluated run (the model is
    registered by reference: `source` is where its weights are; nothing is copied). Returns the
    version. Raises `MlflowUnavailable` on failure."""
    check_reachable(uri)
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                client.get_registered_model(model)
            except MlflowException:
                client.create_registered_model(model)
            version = client.create_model_version(model, source, run_id=run_id)
            client.set_registered_model_alias(model, alias, version.version)
        return str(version.version)
    except Exception as err:  # MLflow raises many types; all mean "not promoted"
        raise MlflowUnavailable(
            f"promoting {model}@{alias} in MLflow ({uri or 'default'}) failed: {err}"
        ) from err
