"""A run as the SQL store holds it, typed: what the gate and `runs` read (never the ORM row).

`StoredRun` carries the columns of `runs` as values and its JSON columns (settings, record, early
stop, protocol) parsed on first use; a column this version cannot read is a one-line
`RecordError` naming the run. `store.sql` builds these; nothing above the store sees a row.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from typing import Any, TypeVar

from mmlu_track.records import codec
from mmlu_track.records.protocol import EvalProtocol, RecordError
from mmlu_track.records.run import EarlyStop, RunRecord, RunRole, Timing
from mmlu_track.settings.checks import eval_config_from_dict
from mmlu_track.settings.config import EvalConfig
from mmlu_track.settings.typed import ConfigError

T = TypeVar("T")


class RunStatus(StrEnum):
    """A run's status in the SQL store (`runs.status`)."""

    RUNNING = "running"
    FINALIZING = "finalizing"  # one process claimed it and aggregates (`SqlStore.claim_finalization`)
    FINISHED = "finished"
    FAILED = "failed"  # resumable: its committed questions are kept
    STOPPED = "stopped"  # by the sequential gate; resumable, never a finished baseline


UNFINISHED = (RunStatus.RUNNING, RunStatus.FAILED, RunStatus.FINALIZING, RunStatus.STOPPED)  # resumable
ACTIVE = (RunStatus.RUNNING, RunStatus.FINALIZING)  # a process should be at work on it: alive or dead


class ShardStatus(StrEnum):
    """One process's claim on its shard of a run (`run_shards.status`)."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class StoredRun:
    """One row of the store's `runs` table: its columns as values, its JSON columns parsed on first
    use (`record`, `early_stop`, `protocol`, `config`), each raising `RecordError` naming the run."""

    id: str
    identity: str
    status: RunStatus
    model_name: str
    model_revision: str | None  # the hub revision, else the local weights' sha256
    model_dtype: str | None  # the dtype it was loaded in (`auto` resolved); None: stored before 0009
    scoring: str
    formulation: str
    k: int
    data_fingerprint: str
    template_hash: str
    git_commit: str | None
    n_questions: int
    acc_micro: float | None
    acc_macro: float | None
    mlflow_run_id: str | None
    mlflow_synced_at: datetime | None
    output_dir: str | None
    sweep: str | None
    created_at: datetime
    finished_at: datetime | None
    owner: str | None  # the process that claimed or finalizes it (`store.liveness.Owner`)
    heartbeat_at: datetime | None
    config_json: str
    record_json: str | None
    stop_json: str | None
    protocol_json: str | None
    role: RunRole = RunRole.EVALUATION

    def _read(self, column: str, text: str, reader: Callable[[dict[str, Any]], T]) -> T:
        """A JSON column as its record; anything unreadable is one `RecordError` naming the run."""
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict):
                raise RecordError(f"{column} is not a JSON object")
            return reader(doc)
        except (ValueError, RecordError) as err:  # bad JSON, or a bad record: re-raised naming the run
            raise RecordError(f"run {self.id}: {err}") from err

    @cached_property
    def record(self) -> RunRecord | None:
        """A finished run's typed record (None while it is unfinished)."""
        return self._read("record_json", self.record_json, RunRecord.from_json) if self.record_json else None

    @cached_property
    def early_stop(self) -> EarlyStop | None:
        """Why the sequential gate stopped this run (kept after a later resume completes it)."""
        return self._read("stop_json", self.stop_json, EarlyStop.from_json) if self.stop_json else None

    @cached_property
    def protocol(self) -> EvalProtocol:
        """What the run's answers are comparable on; for a run stored before `protocol_json`,
        derived from its settings (the dev rows fingerprint from its record, when finished)."""
        if self.protocol_json:
            return self._read("protocol_json", self.protocol_json, EvalProtocol.from_json)
        record = self.record
        return EvalProtocol.of(
            self.config,
            questions=self.data_fingerprint,
            n_questions=self.n_questions,
            dev_fingerprint=record.start.data.dev_fingerprint if record else None,
            template_hash=self.template_hash,
        )

    @cached_property
    def config(self) -> EvalConfig:
        """The settings the run was started with."""
        try:
            return eval_config_from_dict(json.loads(self.config_json))
        except (ValueError, ConfigError) as err:
            raise RecordError(
                f"run {self.id} was recorded with settings this version cannot read: {err}"
            ) from err


def ambiguous(ref: str, found: Sequence[StoredRun]) -> str:
    """What a run id prefix that matches several runs is told (the compare command, `runs show`)."""
    listed = ", ".join(f"{r.id[:12]} ({r.model_name}, k={r.k}, {r.status})" for r in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return f"{ref!r} matches {len(found)} runs: {listed}{more}; give more of the id"


@dataclass(frozen=True)
class ComparisonEntry:
    """One comparison of two runs and its verdict, as the gate records it (`comparisons`)."""

    id: str
    baseline_run_id: str
    candidate_run_id: str
    mode: str  # gate | fewshot_gap | sequential
    policy: str
    verdict: str  # pass | regression | inconclusive | analysis
    delta_micro: float
    delta_macro: float
    p_regression: float | None
    p_noninferiority: float | None
    margin: float
    n_flagged: int
    report_json: str
    created_at: datetime


@dataclass(frozen=True)
class RecordedVerdict:
    """A verdict the gate recorded (`comparisons`), as a re-run of its command takes it back."""

    comparison_id: str
    baseline_run_id: str
    candidate_run_id: str
    status: str  # pass | regression | inconclusive | analysis
    headline: str
    exit_code: int

    @classmethod
    def of(cls, entry: ComparisonEntry) -> RecordedVerdict:
        """The verdict of `entry`, from its report (a report that lacks it: `RecordError`)."""
        try:
            said = json.loads(entry.report_json)["verdict"]
            headline, code = str(said["headline"]), int(said["exit_code"])
        except (ValueError, KeyError, TypeError) as err:
            why = f"comparison {entry.id} was recorded without a readable verdict: {err}"
            raise RecordError(why) from err
        return cls(entry.id, entry.baseline_run_id, entry.candidate_run_id, entry.verdict, headline, code)


@dataclass(frozen=True)
class NoiseEntry:
    """One measurement of an evaluation's own noise, as the store keeps it (`noise_floors`): the
    gate finds it by the prompt protocol of the runs it compares (`EvalProtocol.prompt_key`; a
    measurement stored before that, by the whole protocol's `key`), whichever questions they share.
    Its flip rate serves any n: `margin_at` is the floor at a comparison's own n."""

    id: str
    protocol_key: str
    model_name: str
    reference_run_id: str
    n: int
    flip_rate: float  # the largest among the pairs the gate would compare
    margin: float  # the smallest δ at which a noise-only pair passes 95 % of the time, at n
    shot_seed_range: float | None  # accuracy's range across shot seeds (None: none measured)
    report_json: str
    created_at: datetime
    mlflow_run_id: str | None = None

    @property
    def flip_upper(self) -> float:
        """The one-sided 95 % upper limit of the flip rate (`stats.noise_margin.flip_upper`)."""
        from mmlu_track.stats.noise_margin import flip_upper

        return flip_upper(round(self.flip_rate * self.n), self.n)

    def margin_at(self, n: int, alpha: float) -> float:
        """The floor at n questions: the smallest δ a noise-only pair passes 95 % of the time, at
        the flip rate's upper limit."""
        from mmlu_track.stats.noise_margin import smallest_margin

        return smallest_margin(n, self.flip_upper, alpha)

    @property
    def subjects(self) -> tuple[str, ...] | None:
        """The subjects the measurement's questions came from (None: stored before it said)."""
        found = json.loads(self.report_json).get("subjects")
        return tuple(found) if isinstance(found, list) else None


@codec.closed
@dataclass(frozen=True)
class ShardWork:
    """The one work record, from the scores to `results.json`: what one process did for a run.
    The session adds each unit's (`+`), completes it with its seconds and its backend's traffic,
    and records it when its units are committed; a sharded run's record sums its shards' (`timing`:
    the record's `Timing`), where the finalizer's own share was all it had."""

    data_s: float = 0.0
    model_load_s: float = 0.0
    scoring_s: float = 0.0
    total_s: float = 0.0
    scored: int = 0  # questions scored by this process (not those committed before)
    forwarded: int = 0  # tokens forwarded
    multi_pass: int = 0
    prefix_fallbacks: int = 0
    requests: int = 0  # sent to a served model, retries included (`eval.backend.Traffic`)
    abandoned: int = 0  # of those, cut at model.timeout_s
    abandoned_s: float = 0.0  # seconds spent waiting on the abandoned ones

    def to_json(self) -> dict[str, Any]:
        """The work's fields as a JSON-ready dict."""
        return codec.dump(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ShardWork:
        """The record `to_json` wrote (a field added since takes its default); `RecordError` naming
        the field that is unknown or not of its type."""
        return codec.load(cls, doc, "shard work record")

    @classmethod
    def none(cls) -> ShardWork:
        """No work yet: every count and every second 0 (what `+` starts from)."""
        return cls()

    def __add__(self, other: ShardWork) -> ShardWork:
        """Both works together: each field summed."""
        return ShardWork(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)))

    def timing(self, resumed_subjects: int, total_s: float) -> Timing:
        """The run record's `Timing` (results.json's stable names) of this work: the one place the
        names change (`forwarded` is `tokens_forwarded`, `abandoned` is `abandoned_requests`)."""
        return Timing(
            data_s=round(self.data_s, 3),
            model_load_s=round(self.model_load_s, 3),
            scoring_s=round(self.scoring_s, 3),
            questions_per_s=round(self.scored / max(self.scoring_s, 1e-9), 3),
            resumed_subjects=resumed_subjects,
            tokens_forwarded=self.forwarded,
            total_s=round(total_s, 3),
            requests=self.requests,
            abandoned_requests=self.abandoned,
            abandoned_s=round(self.abandoned_s, 3),
        )


@dataclass(frozen=True)
class StoredShard:
    """One process's claim on a shard of a run (`run_shards`): who, as which scheduler task, when,
    and (once done) what it did."""

    shards: int
    shard: int
    status: ShardStatus
    owner: str | None  # `store.liveness.Owner`
    heartbeat_at: datetime | None
    scheduler: str | None  # `store.liveness.scheduler()`: slurm:JOB.TASK, ray:TASK_ID; None by hand
    work: ShardWork | None
