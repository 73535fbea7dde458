"""The typed record of one run: the only shape in which a run crosses from eval to the stores.

`RunStart` is what is known when scoring begins (settings, weights, questions, provenance): the
MLflow run is opened from it, so a live run already shows its params. `RunRecord` adds what the
evaluation measured. `RunRecord.to_json()` is `results.json`, the SQL store's `runs.record_json`
and MLflow's `results.json` artifact, all the same document; `from_json` reads it back, so every
writer and reader (the stores, `runs`, the gate) uses these fields, never a dict's string keys.

The JSON layout (schema_version 1) is stable: sections `config`, `model`, `data`, `prompt`, `scoring`
(the scoring settings and what scoring saw), `seeds`, `versions`, `git_commit`, `host`, `timing`, `scores`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mmlu_track.records import codec
from mmlu_track.records.annotations import AnnotatedScores, AnnotationSet
from mmlu_track.records.codec import RecordError
from mmlu_track.records.imported import OWN_PROMPTS, Imported
from mmlu_track.records.protocol import EvalProtocol
from mmlu_track.records.reasoning import Reasoning
from mmlu_track.records.results import Accuracies
from mmlu_track.records.robustness import CircularScores, LetterBias
from mmlu_track.settings.checks import eval_config_from_dict
from mmlu_track.settings.config import DEFAULT_SEED, SEEDED_SOURCES, EvalConfig, to_dict
from mmlu_track.settings.resolved import Resolved
from mmlu_track.settings.subjects import BENCHMARK_SUBJECTS
from mmlu_track.settings.typed import ConfigError

SCHEMA_VERSION = 1


@codec.closed
@dataclass(frozen=True)
class ModelInfo:
    """What identifies the loaded weights and how they ran (`dtype` is the resolved one)."""

    name: str
    source: str
    location: str
    revision: str | None
    weights_sha256: str | None
    dtype: str
    device: str
    max_length: int
    add_bos: bool
    vocab_size: int
    n_parameters: int
    server: str | None = None  # a served model: what the server says of it (JSON: /v1/models, version)


@codec.closed
@dataclass(frozen=True)
class DataInfo:
    """The questions a run scored: where they were read from (`data.source`, `data.path`), the
    fingerprints of the test questions and of the shots, their number, and any annotations."""

    source: str
    path: str | None
    fingerprint: str  # sha256 of the scored test questions (the gate pairs runs on it)
    dev_fingerprint: str  # ... of the few-shot examples
    n_questions: int
    annotations: AnnotationSet | None = None  # data.annotations: what was read, how it matched


@dataclass(frozen=True)
class HostInfo:
    """The machine and command line a run was started with (credentials redacted from `argv`), and
    in-process scoring's CPU threads."""

    hostname: str
    platform: str
    argv: tuple[str, ...]
    threads: str | None = (
        None  # in-process scoring's CPU threads and why (`eval.threads`); None: served, or older
    )


class RunRole(StrEnum):
    """Why a run was made (`runs.role`): what a model name resolves to and what a run reuses."""

    EVALUATION = "evaluation"  # an evaluation of the model: a version to compare, reuse and gate
    NOISE = "noise"  # made by the noise command: a measurement of the protocol, not a model version


@dataclass(frozen=True)
class RunStart:
    """A run as it starts scoring."""

    config: EvalConfig
    model: ModelInfo
    data: DataInfo
    template_hash: str
    example_prompt: str  # the first question's prompt, as the model sees it
    seeds: dict[str, int]
    versions: dict[str, str | None]
    git_commit: str | None
    host: HostInfo
    sweep: str | None = None  # the Hydra sweep folder of a -m job
    # What was chosen from `config` as the command started (`settings.resolved`): the MLflow URI the
    # run records into, the CPU threads. None: a run recorded before choices were kept apart (its
    # config then holds the MLflow URI as chosen).
    resolved: Resolved | None = None
    imported: Imported | None = None  # a run read from lm-eval's output (`records.imported`), not scored here
    role: RunRole = RunRole.EVALUATION  # why it was made: what a model name resolves to and what it reuses

    @property
    def mlflow_uri(self) -> str | None:
        """The MLflow URI the run records into, as chosen when it started (a password as `***`)."""
        return self.resolved.mlflow_uri if self.resolved else self.config.tracking.mlflow_uri

    @property
    def protocol(self) -> EvalProtocol:
        """What makes this run comparable to another question by question, from its settings and data
        (an import of lm-eval's own prompts: formulation `lm-eval`, its template hash theirs)."""
        protocol = EvalProtocol.of(
            self.config,
            questions=self.data.fingerprint,
            n_questions=self.data.n_questions,
            dev_fingerprint=self.data.dev_fingerprint,
            template_hash=self.template_hash,
        )
        if self.imported is not None and self.imported.own_prompts:
            return dataclasses.replace(protocol, formulation=OWN_PROMPTS)
        return protocol

    @property
    def name(self) -> str:
        """What tells runs apart, in the order a reviewer scans: the model and its identity (a
        random model's seed, else the revision or the weights' digest), k, the scoring, then each
        setting that differs from its default (formulation, chat, calibration, extraction, choice
        order, random shots, subjects, context), the dtype it ran in, how it was batched or sharded,
        and a sample's size and seed."""
        cfg, m = self.config, self.model
        ident = (
            f"seed{cfg.model.tiny_seed}"
            if m.source in SEEDED_SOURCES
            else (m.revision or m.weights_sha256 or "")[:8]
        )
        parts = [f"{m.name}@{ident}" if ident else m.name, f"k{cfg.k}", cfg.scoring.method]
        optional = [
            (cfg.benchmark != "mmlu", cfg.benchmark),
            (self.protocol.formulation != "original", self.protocol.formulation),
            (cfg.chat.style != "none", f"chat-{cfg.chat.style}"),
            (cfg.scoring.calibration != "none", f"cal-{cfg.scoring.calibration}"),
            (cfg.scoring.extract != "first_char", f"extract-{cfg.scoring.extract}"),
            (cfg.scoring.choice_order != "as_given", cfg.scoring.choice_order),
            (
                cfg.shot_selection == "random",
                f"shots-random{cfg.seed if cfg.shot_seed is None else cfg.shot_seed}",
            ),
            (len(cfg.subjects) != len(BENCHMARK_SUBJECTS[cfg.benchmark]), f"{len(cfg.subjects)}subjects"),
            (cfg.max_length is not None, f"ctx{cfg.max_length}"),
        ]
        # then how it was run: no result depends on it, but a noise check's runs differ only there
        optional += [
            (True, m.dtype),
            (cfg.batch_size != type(cfg).batch_size, f"bs{cfg.batch_size}"),
            (cfg.batch_tokens != type(cfg).batch_tokens, f"bt{cfg.batch_tokens or 'none'}"),
            (cfg.shards > 1, f"{cfg.shards}shards"),
        ]
        parts += [text for wanted, text in optional if wanted]
        if cfg.limit is not None:
            parts.append(f"limit{cfg.limit}" + (f"-sample{cfg.seed}" if cfg.seed != DEFAULT_SEED else ""))
        return "-".join(parts)


@codec.closed
@dataclass(frozen=True)
class Timing:
    """Seconds and counts of the work that made the run: a sharded run's are its shards' summed
    (`records.stored.ShardWork`), a resumed run's those of the process that finished it."""

    data_s: float
    model_load_s: float
    scoring_s: float
    questions_per_s: float  # questions scored / scoring_s (not those resumed from the store)
    resumed_subjects: int
    tokens_forwarded: int
    total_s: float
    # A served model's requests, retries included; those cut at model.timeout_s (the server may
    # still have computed them) and the seconds waited on them. 0 in-process, and in older records.
    requests: int = 0
    abandoned_requests: int = 0
    abandoned_s: float = 0.0


@dataclass(frozen=True)
class RunRecord:
    """A scored run as stored (`results.json`): its `RunStart` and what the evaluation measured."""

    run_id: str
    start: RunStart
    shots_used: dict[int, int]  # shots in the prompt -> questions (fewer than k where one did not fit)
    truncated: int  # prompts scored on their last tokens (allow_truncation=true)
    multi_pass: int  # questions whose answer letters needed a forward pass each
    prefix_fallbacks: int
    timing: Timing
    scores: Accuracies
    circular: CircularScores | None = None  # scoring.choice_order=circular (`records.robustness`)
    letter_bias: LetterBias | None = None  # None: recorded before letter bias was
    annotated: AnnotatedScores | None = None  # data.annotations: counts and the clean accuracies
    reasoning: Reasoning | None = None  # scoring=cot: answers per extraction rule, generations cut

    def to_json(self) -> dict[str, Any]:
        """The record as the schema_version 1 JSON document (`results.json`) that `from_json` reads."""
        s = self.start
        cfg = s.config
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "config": to_dict(cfg),
            "model": codec.dump(s.model),
            "data": codec.dump(s.data),
            "prompt": {
                "formulation": cfg.formulation,
                "template_hash": s.template_hash,
                "k": cfg.k,
                "shots_used": {str(k): v for k, v in sorted(self.shots_used.items())},
                "truncated": self.truncated,
                "example": s.example_prompt,
            },
            "scoring": {
                **to_dict(cfg.scoring),
                "multi_pass": self.multi_pass,
                "prefix_fallbacks": self.prefix_fallbacks,
                "invalid": self.scores.invalid,
            },
            "seeds": s.seeds,
            "versions": s.versions,
            "git_commit": s.git_commit,
            "host": {**codec.dump(s.host), "argv": list(s.host.argv)},
            "sweep": s.sweep,
            **({"resolved": s.resolved.to_json()} if s.resolved else {}),  # absent: recorded before
            **({"imported": codec.dump(s.imported)} if s.imported else {}),  # absent: scored here
            "timing": codec.dump(self.timing),
            "scores": self.scores.to_json(),
            "circular": self.circular.to_json() if self.circular else None,
            "letter_bias": self.letter_bias.to_json() if self.letter_bias else None,
            "annotated": self.annotated.to_json() if self.annotated else None,
            # absent: not a chain of thought (as before they were)
            **({"reasoning": self.reasoning.to_json()} if self.reasoning else {}),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunRecord:
        """The record `to_json` wrote; `RecordError` for another schema version or a document that
        cannot be read (a missing field or a wrong type, named by its path in the document;
        settings this version refuses)."""
        if raw.get("schema_version") != SCHEMA_VERSION:
            raise RecordError(f"record schema {raw.get('schema_version')!r}, this version reads 1")
        doc = codec.load(_Document, raw, "run record")
        try:
            config = eval_config_from_dict(doc.config)
        except (KeyError, TypeError, ValueError, ConfigError) as err:
            raise RecordError(f"unreadable run record: config: {err}") from err
        start = RunStart(
            config=config,
            model=doc.model,
            data=doc.data,
            template_hash=doc.prompt.template_hash,
            example_prompt=doc.prompt.example,
            seeds=doc.seeds,
            versions=doc.versions,
            git_commit=doc.git_commit,
            host=doc.host,
            sweep=doc.sweep,
            resolved=doc.resolved,
            imported=doc.imported,
        )
        return cls(
            run_id=doc.run_id,
            start=start,
            shots_used=doc.prompt.shots_used,
            truncated=doc.prompt.truncated,
            multi_pass=doc.scoring.multi_pass,
            prefix_fallbacks=doc.scoring.prefix_fallbacks,
            timing=doc.timing,
            scores=doc.scores,
            circular=doc.circular,
            letter_bias=doc.letter_bias,
            annotated=doc.annotated,
            reasoning=doc.reasoning,
        )


@dataclass(frozen=True)
class _Prompt:
    """`results.json`'s `prompt` section as read (`formulation` and `k` repeat the settings: ignored)."""

    template_hash: str
    example: str
    shots_used: dict[int, int]  # keys written as strings: "5"
    truncated: int


@dataclass(frozen=True)
class _Scoring:
    """`results.json`'s `scoring` section as read (the settings it repeats and the derived `invalid`:
    ignored)."""

    multi_pass: int
    prefix_fallbacks: int


@dataclass(frozen=True)
class _Document:
    """`results.json` as `RunRecord.from_json` reads it: its layout (schema_version 1), each value
    typed, checked by `codec.load` (a failure named by its path in the document); keys it does not
    name are ignored, as the host's. `RunRecord.to_json` writes it."""

    run_id: str
    config: dict[str, Any]  # the settings: checked by `eval_config_from_dict`
    model: ModelInfo
    data: DataInfo
    prompt: _Prompt
    scoring: _Scoring
    seeds: dict[str, int]
    versions: dict[str, str | None]
    git_commit: str | None
    host: HostInfo
    timing: Timing
    scores: Accuracies
    sweep: str | None = None
    resolved: Resolved | None = None  # absent: recorded before the choices were kept apart
    imported: Imported | None = None  # absent: a run scored here
    # absent or null: not recorded (a run before them, or not circular, or not annotated)
    circular: CircularScores | None = None
    letter_bias: LetterBias | None = None
    annotated: AnnotatedScores | None = None
    reasoning: Reasoning | None = None


@codec.closed
@dataclass(frozen=True)
class EarlyStop:
    """The sequential gate stopped the run's evaluation at a look (`runs.stop_json`): the run is
    `stopped`, never a full baseline, and the same command without gate.sequential resumes it."""

    look: int
    looks: int
    questions_scored: int
    questions_total: int
    verdict: str  # pass | regression
    reason: str
    baseline_run_id: str

    def to_json(self) -> dict[str, Any]:
        """The record's fields as a JSON-ready dict."""
        return codec.dump(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> EarlyStop:
        """The record `to_json` wrote; `RecordError` naming the field that is missing, unknown or
        not of its type."""
        return codec.load(cls, doc, "early-stop record")

    def summary(self) -> str:
        """One line: the verdict, the look it stopped at and the questions scored of the total."""
        return (
            f"stopped early by the sequential gate ({self.verdict}) at look {self.look} of {self.looks}, "
            f"{self.questions_scored:,} of {self.questions_total:,} questions scored"
        )
