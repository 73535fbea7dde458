"""The typed record of one run: the only shape in which a run crosses from eval to the stores.

`RunStart` is what is known when scoring begins (settings, weights, questions, provenance): the
MLflow run is opened from it, so a live run already shows its params. `RunRecord` adds what the
evaluation measured. `RunRecord.to_json()` is `results.json`, the SQL store's `runs.record_json`
and MLflow's `results.json` artifact, all the same document; `from_json` reads it back, so every
writer and reader (the stores, `runs`, the gate) uses these fields, never a dict's string keys.

The JSON layout (schema_version 1) is stable: sections `config`, `model`, `data`, `prompt`,
`scoring` (the scoring settings and what scoring saw), `seeds`, `versions`, `git_commit`, `host`,
`timing`, `scores`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mmlu_track.config import ConfigError, EvalConfig, eval_config_from_dict, to_dict
from mmlu_track.eval.results import Scores

SCHEMA_VERSION = 1


class RecordError(ValueError):
    """A stored record this version cannot read (written by an incompatible mmlu_track)."""


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


@dataclass(frozen=True)
class DataInfo:
    source: str
    path: str | None
    fingerprint: str  # sha256 of the scored test questions (the gate pairs runs on it)
    dev_fingerprint: str  # ... of the few-shot examples
    n_questions: int


@dataclass(frozen=True)
class HostInfo:
    hostname: str
    platform: str
    argv: tuple[str, ...]


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

    @property
    def name(self) -> str:
        """What tells runs apart: model, formulation, k, scoring, calibration, dtype, limit and seed."""
        cfg = self.config
        parts = [self.model.name, cfg.formulation, f"k{cfg.k}", cfg.scoring.method]
        if cfg.scoring.calibration != "none":
            parts.append(f"cal-{cfg.scoring.calibration}")
        parts.append(self.model.dtype)
        if cfg.limit is not None:
            parts += [f"limit{cfg.limit}", f"seed{cfg.seed}"]
        return "-".join(str(p) for p in parts)


@dataclass(frozen=True)
class Timing:
    data_s: float
    model_load_s: float
    scoring_s: float
    questions_per_s: float  # of the questions scored by this process (a resumed run's own share)
    resumed_subjects: int
    tokens_forwarded: int
    total_s: float


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    start: RunStart
    shots_used: dict[int, int]  # shots in the prompt -> questions (fewer than k where one did not fit)
    truncated: int  # prompts scored on their last tokens (allow_truncation=true)
    multi_pass: int  # questions whose answer letters needed a forward pass each
    prefix_fallbacks: int
    timing: Timing
    scores: Scores

    def to_json(self) -> dict[str, Any]:
        s = self.start
        cfg = s.config
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "config": to_dict(cfg),
            "model": dataclasses.asdict(s.model),
            "data": dataclasses.asdict(s.data),
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
            "host": {**dataclasses.asdict(s.host), "argv": list(s.host.argv)},
            "sweep": s.sweep,
            "timing": dataclasses.asdict(self.timing),
            "scores": self.scores.to_json(),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunRecord:
        if raw.get("schema_version") != SCHEMA_VERSION:
            raise RecordError(f"record schema {raw.get('schema_version')!r}, this version reads 1")
        try:
            host = raw["host"]
            start = RunStart(
                config=eval_config_from_dict(raw["config"]),
                model=ModelInfo(**raw["model"]),
                data=DataInfo(**raw["data"]),
                template_hash=raw["prompt"]["template_hash"],
                example_prompt=raw["prompt"]["example"],
                seeds=dict(raw["seeds"]),
                versions=dict(raw["versions"]),
                git_commit=raw["git_commit"],
                host=HostInfo(host["hostname"], host["platform"], tuple(host["argv"])),
                sweep=raw.get("sweep"),
            )
            scoring = raw["scoring"]
            return cls(
                run_id=raw["run_id"],
                start=start,
                shots_used={int(k): int(v) for k, v in raw["prompt"]["shots_used"].items()},
                truncated=int(raw["prompt"]["truncated"]),
                multi_pass=int(scoring["multi_pass"]),
                prefix_fallbacks=int(scoring["prefix_fallbacks"]),
                timing=Timing(**raw["timing"]),
                scores=Scores.from_json(raw["scores"]),
            )
        except (KeyError, TypeError, ValueError, ConfigError) as err:
            raise RecordError(f"unreadable run record ({type(err).__name__}: {err})") from err


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
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> EarlyStop:
        try:
            return cls(**doc)
        except TypeError as err:
            raise RecordError(f"unreadable early-stop record: {err}") from err

    def summary(self) -> str:
        return (
            f"stopped early by the sequential gate ({self.verdict}) at look {self.look} of {self.looks}, "
            f"{self.questions_scored:,} of {self.questions_total:,} questions scored"
        )
