"""A stored run row's JSON columns read back as typed records (settings, record, early stop,
protocol); a column this version cannot read is a one-line `StoreError` naming the run."""

from __future__ import annotations

import json

from mmlu_track.config import ConfigError, EvalConfig, eval_config_from_dict
from mmlu_track.store.db import StoreError
from mmlu_track.store.orm import Run
from mmlu_track.store.record import EarlyStop, Protocol, RecordError, RunRecord


def record_of(run: Run) -> RunRecord | None:
    """A finished run's typed record (None while it is unfinished)."""
    if not run.record_json:
        return None
    try:
        return RunRecord.from_json(json.loads(run.record_json))
    except (ValueError, RecordError) as err:
        raise StoreError(f"run {run.id}: {err}") from err


def early_stop_of(run: Run) -> EarlyStop | None:
    """Why the sequential gate stopped this run (kept after a later resume completes it)."""
    if not run.stop_json:
        return None
    try:
        return EarlyStop.from_json(json.loads(run.stop_json))
    except (ValueError, RecordError) as err:
        raise StoreError(f"run {run.id}: {err}") from err


def protocol_of(run: Run) -> Protocol:
    """What the run's answers are comparable on; for a run stored before `protocol_json`, derived
    from its settings (the dev rows fingerprint from its record, when finished)."""
    if run.protocol_json:
        try:
            return Protocol.from_json(json.loads(run.protocol_json))
        except (ValueError, RecordError) as err:
            raise StoreError(f"run {run.id}: {err}") from err
    record = record_of(run)
    return Protocol.of(
        config_of(run),
        questions=run.data_fingerprint,
        n_questions=run.n_questions,
        dev_fingerprint=record.start.data.dev_fingerprint if record else None,
        template_hash=run.template_hash,
    )


def config_of(run: Run) -> EvalConfig:
    """The settings a run was started with."""
    try:
        return eval_config_from_dict(json.loads(run.config_json))
    except (ValueError, ConfigError) as err:
        raise StoreError(f"run {run.id} was recorded with settings this version cannot read: {err}") from err
