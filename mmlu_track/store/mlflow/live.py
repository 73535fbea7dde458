"""An evaluation's live MLflow run, and what it logs: params, tags, metrics, artifacts.

An evaluation's MLflow run opens when scoring starts (`LiveRun.open`: params and tags from the
`RunStart`), takes the running accuracy as each subject is committed (`subject_done`: a run a
user can watch in the UI), and ends FINISHED with every metric and artifact (`finish`), or
FAILED / KILLED (`end`). A resumed evaluation reopens the same MLflow run; the shards of a sharded
run all log to one (`join`), which the shard that finalizes the run ends. Reaching a store
(limits, first use, reachability): `client`.

MLflow being unreachable costs nothing: the first failure is one warning, later calls are
skipped, the SQL store keeps the run, and `python -m mmlu_track.runs sync` logs it when MLflow is
back (`sync`). A URI may carry credentials (`http://user:password@host`): they reach the
server as MLflow's own client sends them, and no message carries the password.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import mmlu_track.store.mlflow.views as mlflow_views
from mmlu_track.records.results import Accuracies, Accuracy, Docs, QuestionResult, write_jsonl
from mmlu_track.records.run import EarlyStop, RunRecord, RunStart
from mmlu_track.settings.config import applies, to_dict
from mmlu_track.settings.subjects import BENCHMARK_SUBJECTS, LETTERS
from mmlu_track.settings.typed import flatten
from mmlu_track.store.locations import mlflow_uri
from mmlu_track.store.mlflow.client import client_and_experiment, failures, quiet
from mmlu_track.store.mlflow.pages import NOTE_TAG, dataset_input, description, percent, shown
from mmlu_track.store.mlflow.tables import QUESTIONS_TABLE, question_columns
from mmlu_track.support.credentials import redact, redact_text

SWEEP_TAG = "mmlu_track.sweep"
IMPORTED_TAG = "mmlu_track.imported_from"  # a run read from another tool's output: which tool
RUN_ID_TAG = "mmlu_track.run_id"
KIND_TAG = "mmlu_track.kind"
GATE_TAG = "mmlu_track.gate"  # on a candidate's run: its latest comparison's verdict and run id
# Tags of a run the sequential gate stopped: a resume to completion deletes them, and the run's name
# says it in the runs table. Its accuracy so far goes under `stopped/` (MLflow cannot delete a
# metric: a resumed run keeps them, apart from the full run's `acc_micro`).
# The per-question rows go to MLflow gzipped (a full run's predictions.jsonl: ~12.6 MB, ~2.5 MB so;
# the same rows are in the SQL store, the run folder's plain copy and the questions table).
GZIPPED_PREDICTIONS = "predictions.jsonl.gz"
EARLY_STOP_TAGS = ("mmlu_track.early_stop", "mmlu_track.early_stop_reason")
Warn = Callable[[str], None]
# MLflow's answers to reopening a run that is not there (another server) or deleted
RUN_GONE = ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")


def metric_key(*parts: str) -> str:
    """MLflow keys allow letters, digits, `_-./` and spaces: `other (business, ...)` -> `other`."""
    cleaned = [
        re.sub(r"[^A-Za-z0-9_\-. ]", "", re.sub(r"\s*\(.*\)", "", p)).strip().replace(" ", "_") for p in parts
    ]
    return "/".join(cleaned)


def subject_metrics(subject: str, acc: Accuracy) -> dict[str, float]:
    """A subject's accuracy as MLflow metrics: `acc/<subject>`, and `stderr/<subject>` where its
    standard error is known (keys cleaned by `metric_key`)."""
    out = {metric_key("acc", subject): acc.acc}
    if acc.stderr is not None:
        out[metric_key("stderr", subject)] = acc.stderr
    return out


def metrics(record: RunRecord) -> dict[str, float]:
    """The run's metrics in the order its MLflow page lists them (the order logged): the headline
    accuracies and categories first, then counts, robustness and timing, then the 57 subjects."""
    scores, circular = record.scores, record.circular
    out: dict[str, float] = {}
    if circular:  # a circular run's headline first, its accuracy as given next
        out |= {"circular_micro": circular.accuracy.micro.acc, "circular_macro": circular.accuracy.macro.acc}
    out |= {"acc_micro": scores.micro.acc, "acc_macro": scores.macro.acc}
    for name, a in (("micro", scores.micro), ("macro", scores.macro)):
        if a.stderr is not None:
            out[f"stderr_{name}"] = a.stderr
    out.update({metric_key("acc", "category", k): a.acc for k, a in scores.categories.items()})
    out |= {
        "n_questions": float(scores.micro.n),
        "invalid": float(scores.invalid),
        "questions_per_s": record.timing.questions_per_s,
    }
    if record.timing.requests:  # a served model's
        out["requests"] = float(record.timing.requests)
        out["requests_abandoned"] = float(record.timing.abandoned_requests)
    out.update(_robustness(record))
    out.update(_annotated(record))
    for subject, a in scores.subjects.items():
        out.update(subject_metrics(subject, a))
    for group, table in (("category", scores.categories), ("subcategory", scores.subcategories)):
        for name, a in table.items():
            out[metric_key("acc", group, name)] = a.acc
            if a.stderr is not None:
                out[metric_key("stderr", group, name)] = a.stderr
    return out


def _robustness(record: RunRecord) -> dict[str, float]:
    """Circular accuracy (overall first, subjects after) and the letter bias."""
    out: dict[str, float] = {}
    figures_by_name: dict[str, Accuracies] = {}
    if c := record.circular:
        figures_by_name = {
            "circular": c.accuracy,
            "rotation_mean": c.mean_rotation,
            "consistency": c.consistency,
        }
        for name, figures in figures_by_name.items():
            out[f"{name}_micro"], out[f"{name}_macro"] = figures.micro.acc, figures.macro.acc
    if bias := record.letter_bias:
        asked = max(sum(bias.gold), 1)
        for letter, n, recall in zip(LETTERS, bias.predicted, bias.recall, strict=False):
            out[f"predicted_share_{letter}"] = n / asked
            if recall is not None:
                out[f"recall_{letter}"] = recall
        if bias.letter_following is not None:
            out["letter_following"] = bias.letter_following
    if cot := record.reasoning:  # questions per extraction rule; generations the token limit cut
        out.update({metric_key("extraction", rule): n for rule, n in cot.rules.items()})
        out["cut_by_token_limit"] = cot.finished.get("length", 0)
        out["generated_tokens_mean"] = cot.tokens / max(sum(cot.rules.values()), 1)
    for name, figures in figures_by_name.items():
        out.update({metric_key(name, "category", k): a.acc for k, a in figures.categories.items()})
        out.update({metric_key(name, s): a.acc for s, a in figures.subjects.items()})
    return out


def _annotated(record: RunRecord) -> dict[str, float]:
    """With MMLU-Redux annotations: accuracy on the questions annotated ok (`clean/`), how many of
    the scored questions carry each annotation, and how the set matched (`annotations/`)."""
    sets, annotated = record.start.data.annotations, record.annotated
    if sets is None or annotated is None:
        return {}
    out: dict[str, float] = {}
    if clean := annotated.clean:
        out |= {"clean/acc_micro": clean.micro.acc, "clean/acc_macro": clean.macro.acc}
        out.update({metric_key("clean", "acc", "category", k): a.acc for k, a in clean.categories.items()})
    out |= {f"annotations/{k.replace(' ', '_')}": float(n) for k, n in annotated.counts.items()}
    out |= {"annotations/matched": float(sets.matched), "annotations/unmatched": float(sets.unmatched)}
    return out


def params(start: RunStart) -> dict[str, str]:
    """Every setting of the run and every field of what it loaded, by dotted name: a field added
    to the settings (`config.py`), to `ModelInfo` or to `DataInfo` is a param with no edit here.
    `model.*`/`data.*` are what was loaded (the resolved revision), over what was asked for."""
    cfg = start.config
    # `shard`: which process opened the run, not a setting of the run (all its shards log to it)
    settings = {k: v for k, v in to_dict(cfg).items() if k not in ("tracking", "gate", "subjects", "shard")}
    out: dict[str, object] = {
        **flatten(settings),
        **flatten({"model": dataclasses.asdict(start.model), "data": dataclasses.asdict(start.data)}),
        "dtype": start.model.dtype,  # resolved: `auto` is recorded as what it ran in
        "scoring": cfg.scoring.method,
        "subjects": "all" if cfg.subjects == BENCHMARK_SUBJECTS[cfg.benchmark] else ",".join(cfg.subjects),
        "prompt.template_hash": start.template_hash,
        **{f"version.{k}": v for k, v in start.versions.items()},
        # what was chosen from the settings as the run started: the threads, the URI (no password)
        **({f"resolved.{k}": v for k, v in start.resolved.to_json().items()} if start.resolved else {}),
        # an imported run: where it came from, what lm-eval recorded (`records.imported`)
        **(flatten({"imported": dataclasses.asdict(start.imported)}) if start.imported else {}),
    }
    out.pop("scoring.method")
    # Once each: the dtype and device it ran in (the settings `auto` resolved) are `dtype`, `device`.
    out["device"] = out.pop("model.device")
    out.pop("model.dtype")
    # An unset value (no revision for a local model, no limit) is left out, not logged as "None",
    # and so is a setting that does not apply to this model or scoring (`config.applies`).
    return {k: str(v)[:6000] for k, v in out.items() if v is not None and applies(k, cfg)}


def tags(run_id: str, start: RunStart) -> dict[str, str]:
    """The MLflow tags of the evaluation `run_id` (the SQL store's id): kind, git commit (`unknown`
    without one), host, device, model, its colour in the runs-table view, and its sweep, if any."""
    out = {
        RUN_ID_TAG: run_id,
        KIND_TAG: "evaluation",
        "git_commit": start.git_commit or "unknown",
        "host": start.host.hostname,
        "device": start.model.device,
        "model": start.model.name,
        mlflow_views.RUN_COLOR_TAG: mlflow_views.evaluation_color(run_id),
    }
    if start.sweep:
        out[SWEEP_TAG] = start.sweep
    if start.imported:
        out[IMPORTED_TAG] = start.imported.tool
    return out


class LiveRun:
    """One evaluation's MLflow run, kept in step with it. No method raises: the first failure is
    reported through `warn` and turns the rest into no-ops (`broken`)."""

    def __init__(
        self,
        uri: str | None,
        experiment: str,
        warn: Warn,
        then: str = "; the evaluation goes on without it",
        label: str | None = None,
    ) -> None:
        """`label`: said before the run's name (`noise repeat: …`; `pipeline.prepare.Origin.label`)."""
        self.uri, self.experiment, self._warn, self._then = uri, experiment, warn, then
        self.label = label
        self.client: Any = None
        self.id: str | None = None
        self.experiment_id: str | None = None
        self.broken = False
        self._logged: set[str] = set()  # metric keys this process has logged

    def _call(self, what: str, fn: Callable[[], None]) -> bool:
        if self.broken:
            return False
        try:
            with quiet():
                fn()
        except failures() as err:  # a store MLflow cannot use: "not logged"; anything else is a bug
            self.broken = True
            self._warn(
                f"{what} in MLflow ({redact(self.uri or 'default')}) failed: "
                f"{redact_text(str(err).splitlines()[0])}{self._then}"
            )
            return False
        return True

    def _name(self, start: RunStart) -> str:
        return f"{self.label}: {start.name}" if self.label else start.name

    def open(
        self, run_id: str, start: RunStart, existing: str | None = None, started: datetime | None = None
    ) -> str | None:
        """Open (or reopen, for a resumed evaluation) the run, started at `started` (default now);
        its MLflow id, or None when down."""

        def go() -> None:
            self.client, exp_id = client_and_experiment(
                self.uri, self.experiment, "evaluations", self._name(start)
            )
            self.experiment_id = exp_id
            from mlflow.entities import Param, RunStatus, RunTag
            from mlflow.exceptions import MlflowException

            if existing:
                try:
                    self.client.update_run(
                        existing, status=RunStatus.to_string(RunStatus.RUNNING), name=self._name(start)
                    )  # the name back, if an early stop had changed it
                except MlflowException as err:
                    # Gone (another server) or deleted: a new run then. Anything else (a locked or
                    # failing store) is not a reason to replace the run the SQL store records.
                    if err.error_code not in RUN_GONE:
                        raise
                else:
                    self.id = existing
                    for tag in EARLY_STOP_TAGS:  # resumed after an early stop: no longer one
                        with contextlib.suppress(MlflowException):
                            self.client.delete_tag(existing, tag)
                    return
            new = self.client.create_run(
                exp_id,
                run_name=self._name(start),
                tags=tags(run_id, start),
                start_time=int(started.timestamp() * 1000) if started else None,
            )
            mlflow_id = str(new.info.run_id)
            try:
                self.client.log_batch(
                    mlflow_id,
                    params=[Param(k, v) for k, v in params(start).items()],
                    tags=[RunTag(k, v) for k, v in tags(run_id, start).items()],
                )
                self._log_dataset(mlflow_id, start)
            except BaseException:
                with contextlib.suppress(*failures()):  # no half-made run left RUNNING for ever
                    self.client.delete_run(mlflow_id)
                raise
            self.id = mlflow_id

        self._call("opening the run", go)
        return self.id if not self.broken else None

    def _log_dataset(self, mlflow_id: str, start: RunStart) -> None:
        """Shards starting together race to create the experiment's dataset row (unique by name and
        digest: one store refused the loser with an IntegrityError); the second try finds it made."""
        datasets = [dataset_input(start)]
        try:
            self.client.log_inputs(mlflow_id, datasets=datasets)
        except failures():
            self.client.log_inputs(mlflow_id, datasets=datasets)

    def view_url(self) -> str | None:
        """The address of the experiment's `mmlu_track` runs-table view (`mlflow_views`), once open."""
        return mlflow_views.url(mlflow_uri(self.uri), self.experiment_id) if self.experiment_id else None

    def join(self, other: str) -> None:
        """A shard opened the run's MLflow run first: this one's is deleted, `other` logged to."""
        mine = self.id

        def go() -> None:
            self.id = other
            if mine is not None:
                self.client.delete_run(mine)  # soft: MLflow's UI and searches leave it out

        self._call("joining the run", go)

    def _log_metrics(self, values: Mapping[str, float], step: int = 0) -> None:
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self.client.log_batch(
            self.id, metrics=[Metric(k, shown(k, float(v)), ts, step) for k, v in values.items()]
        )
        self._logged.update(values)

    def subject_done(self, subjects_done: int, so_far: Accuracy) -> None:
        """The run's micro accuracy so far, at step = subjects done: a run a user can watch. The
        subjects' own accuracies wait for `finish`, after the headline: MLflow lists a run's
        metrics in the order they were logged, and a reviewer looks for `acc_micro` first."""
        if self.id is None:
            return
        progress = {"progress/acc_micro": so_far.acc, "progress/questions": float(so_far.n)}
        self._call("logging progress", lambda: self._log_metrics(progress, step=subjects_done))

    def finish(self, record: RunRecord, results: Sequence[QuestionResult], docs: Docs | None = None) -> bool:
        """Every metric not yet logged here, the artifacts, status FINISHED. True when all went in."""
        if self.id is None:
            return False

        def go() -> None:
            from mmlu_track.store.mlflow.plots import subject_accuracy_png

            logged = self._logged | set(self.client.get_run(self.id).data.metrics)  # by any shard
            self._log_metrics({k: v for k, v in metrics(record).items() if k not in logged})
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp)
                doc = record.to_json()
                (out / "results.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False))
                write_jsonl(out / GZIPPED_PREDICTIONS, results, docs)
                (out / "config.json").write_text(json.dumps(doc["config"], indent=2))
                (out / "example_prompt.txt").write_text(record.start.example_prompt)
                subject_accuracy_png(record.scores, out / "subject_accuracy.png", record.start.name)
                self.client.log_artifacts(self.id, str(out))
            # The questions as a table the artifact view shows and filters. MLflow appends to a table
            # already there: a finish tried again (`runs sync` after a failed one) would double it.
            there = {a.path for a in self.client.list_artifacts(self.id)}
            if results and QUESTIONS_TABLE not in there:
                self.client.log_table(
                    self.id, data=question_columns(results, docs), artifact_file=QUESTIONS_TABLE
                )
            self.client.set_tag(self.id, NOTE_TAG, description(record))
            self.client.set_terminated(self.id, status="FINISHED")

        return self._call("logging the results", go)

    def stopped(self, stop: EarlyStop, so_far: Accuracy, name: str, files: Sequence[Path] = ()) -> None:
        """The sequential gate stopped the evaluation: FINISHED with its end time, its name starting
        with where it stopped, tags and the description saying where and why, its accuracy on the
        questions scored under `stopped/` (a part of the questions, never charted as a run's), and
        `files` (its questions so far, the stop's record) as artifacts."""
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
                f"Stopped by the sequential gate: {stop.summary()} ({where})\n\n{stop.reason}. Gated "
                f"against run {stop.baseline_run_id}. Accuracy on the {so_far.n:,} questions scored: "
                f"{percent(so_far)} (a part of the questions: not comparable with a full run's).",
            )
            # `stopped/`: never mixed with a full run's acc_micro in a chart across runs
            self._log_metrics({"stopped/acc_micro": so_far.acc, "stopped/questions": float(so_far.n)})
            with tempfile.TemporaryDirectory() as tmp:
                for path in files:
                    logged = Path(tmp) / f"{path.name}.gz" if path.suffix == ".jsonl" else path
                    if logged != path:
                        logged.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
                    self.client.log_artifact(self.id, str(logged))
            labelled = f"{self.label}: {name}" if self.label else name  # `rerun: …` stays told apart
            self.client.update_run(self.id, name=f"stopped ({where}) {labelled}")
            self.client.set_terminated(self.id, status="FINISHED")  # with its end time: a duration

        self._call("ending the stopped run", go)

    def end(self, status: Literal["FAILED", "KILLED"]) -> None:
        """End the MLflow run as `status`; nothing before it is opened, and a failure is a warning."""
        if self.id is not None:
            self._call("ending the run", lambda: self.client.set_terminated(self.id, status=status))
