"""The one mapping between typed records and the SQL store's rows: a question result and its row, a
run's typed start and its columns (a new column is a field here, in `orm.py` and a migration),
a row and the `StoredRun` every reader above the store gets."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select

from mmlu_track.records.results import QuestionResult, RotatedAnswer
from mmlu_track.records.run import RunRole, RunStart
from mmlu_track.records.stored import RunStatus, StoredRun
from mmlu_track.settings.config import to_dict
from mmlu_track.store.liveness import current_owner
from mmlu_track.store.orm import QuestionRow, Run


def utc_now() -> datetime:
    """Now in UTC, without a zone: the store's timestamps are naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


_LOGPROBS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")  # logprob_a .. logprob_j: A to J


def to_row(run_id: str, r: QuestionResult) -> QuestionRow:
    """The row of question result `r` in run `run_id` (not added to any session)."""
    lp = {f"logprob_{x}": v for x, v in zip(_LOGPROBS, r.logprobs or (), strict=False)}
    return QuestionRow(
        run_id=run_id, subject=r.subject, question_index=r.index, prompt_hash=r.prompt_hash,
        shots_used=r.shots_used, n_tokens=r.n_tokens, truncated=r.truncated, **lp,
        generated=r.generated, prediction=r.prediction, gold=r.gold, correct=r.correct, margin=r.margin,
        scored_by=r.scored_by,
        rotations_json=json.dumps([dataclasses.asdict(a) for a in r.rotations]) if r.rotations else None,
        annotation=r.annotation, options=r.options, src=r.src, extraction=r.extraction,
        new_tokens=r.new_tokens, finish=r.finish,
    )  # fmt: skip


# The columns a question result is read from, in `from_columns`' order: selected as plain tuples,
# not ORM objects (a full run's 14,042 rows: ~0.1 s instead of ~1 s of CPU in every compare).
COLUMNS = (
    QuestionRow.subject, QuestionRow.question_index, QuestionRow.prompt_hash, QuestionRow.shots_used,
    QuestionRow.n_tokens, QuestionRow.truncated, QuestionRow.generated, QuestionRow.prediction,
    QuestionRow.gold, QuestionRow.margin, QuestionRow.scored_by, QuestionRow.rotations_json,
    QuestionRow.annotation, QuestionRow.options, QuestionRow.src, QuestionRow.extraction,
    QuestionRow.new_tokens, QuestionRow.finish, *(getattr(QuestionRow, f"logprob_{x}") for x in _LOGPROBS),
)  # fmt: skip


def from_columns(row: Sequence[Any]) -> QuestionResult:
    """A question result from one row of `COLUMNS`."""
    subject, index, prompt_hash, shots, n_tokens, truncated, generated, prediction, gold = row[:9]
    margin, scored_by, rotations, annotation, options, src, extraction, new_tokens, finish = row[9:18]
    logprobs = tuple(row[18 : 18 + options])
    return QuestionResult(
        subject=subject, index=index, prompt_hash=prompt_hash, shots_used=shots, n_tokens=n_tokens,
        truncated=truncated, logprobs=None if logprobs[0] is None else logprobs, generated=generated,
        prediction=prediction, gold=gold, margin=margin, scored_by=scored_by,
        rotations=tuple(RotatedAnswer.from_json(r) for r in json.loads(rotations)) if rotations else (),
        annotation=annotation, options=options, src=src, extraction=extraction, new_tokens=new_tokens,
        finish=finish,
    )  # fmt: skip


def new_run(start: RunStart, identity: str, output_dir: str | None) -> Run:
    """The row of a new run (not added to any session): its columns, the one mapping from a run's
    typed start to the SQL store (a new column is a field here, in `orm.Run` and a migration)."""
    now, cfg = utc_now(), start.config
    return Run(
        id=uuid.uuid4().hex, identity=identity, status=RunStatus.RUNNING,
        model_name=start.model.name, model_revision=start.model.revision or start.model.weights_sha256,
        model_dtype=start.model.dtype,
        scoring=cfg.scoring.method, formulation=start.protocol.formulation, k=cfg.k,
        data_fingerprint=start.data.fingerprint, template_hash=start.template_hash,
        git_commit=start.git_commit, config_json=json.dumps(to_dict(cfg)),
        n_questions=start.data.n_questions, output_dir=output_dir, sweep=start.sweep, created_at=now,
        owner=str(current_owner()), heartbeat_at=now, protocol_json=json.dumps(start.protocol.to_json()),
        role=str(start.role),
    )  # fmt: skip


Batched = tuple[int, int | None]  # (batch_size, batch_tokens) a run was scored with


def batched_as(row: Run, batching: Batched | None) -> bool:
    """Whether the run was scored at `batching` (None: at any)."""
    if batching is None:
        return True
    cfg = stored(row).config
    return (cfg.batch_size, cfg.batch_tokens) == batching


def stored(row: Run) -> StoredRun:
    """The typed record of a run row: what every reader above the store gets."""
    values = {f.name: getattr(row, f.name) for f in dataclasses.fields(StoredRun)}
    return StoredRun(**{**values, "status": RunStatus(row.status), "role": RunRole(row.role or "evaluation")})


def provisional(start: RunStart, identity: str) -> StoredRun:
    """The run about to start, as a reader would see it (the sequential gate picks its baseline
    before the candidate is recorded)."""
    return stored(new_run(start, identity, None))


def with_noise(noise: bool) -> list[Any]:
    """The filter of a lookup of runs: the evaluations alone, or with `noise` the noise command's too."""
    return [] if noise else [Run.role == str(RunRole.EVALUATION)]


def taken_by(role: RunRole) -> list[Any]:
    """Which stored runs a run of `role` may resume or take as its own: an evaluation only
    evaluations (a noise command's repeat is never a model version's run); the noise command any
    run of its identity (its reference is the evaluation it was given)."""
    return with_noise(role == RunRole.NOISE)


def newest(query: Select[Run], batching: Batched | None) -> Select[Run]:
    """Runs newest first: only the newest, unless it must also have been scored at `batching`."""
    return query.order_by(Run.created_at.desc()).limit(1 if batching is None else None)
