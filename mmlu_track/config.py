"""Typed, frozen configuration: the only shape of config that code below the entry point sees.

`__main__` turns Hydra's composed `DictConfig` into a plain dict once and calls
`eval_config_from_dict`; nothing else in the package imports hydra or omegaconf.
Every value is checked here, and a bad one raises `ConfigError` with one line saying what is
wrong and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from mmlu_track.credentials import redact_doc
from mmlu_track.eval.subjects import SUBJECTS

ModelSource = Literal["hub", "gguf", "tiny"]
DataSource = Literal["packaged", "hub", "local"]
ScoringMethod = Literal["logprob", "generate"]
Calibration = Literal["none", "mean"]
Formulation = Literal["original", "harness", "question"]
ShotSelection = Literal["first", "random"]
Dtype = Literal["float32", "bfloat16", "float16", "auto"]

DEV_EXAMPLES_PER_SUBJECT = 5  # MMLU's dev split has exactly 5 per subject
MAX_SEED = 2**63 - 1  # torch.manual_seed and numpy's generators overflow (a traceback) beyond 64 bits


class ConfigError(ValueError):
    """A configuration value is missing, unknown or impossible. The message is one line."""


@dataclass(frozen=True)
class ModelConfig:
    """Which causal LM to load and how.

    `source`: `hub` = a hub id or a local directory for `AutoModelForCausalLM`; `gguf` = a GGUF
    file (`gguf_file`) in `name_or_path`, or in the installed Python package `package`;
    `tiny` = a random-weight llama built from `tiny_*` with the packaged SmolLM2 tokenizer.
    `add_bos`: None keeps the tokenizer's own choice; True/False forces a BOS token or none.
    `device_map` (hub models): `auto` lets accelerate spread a model too big for one GPU over the
    visible GPUs (then CPU memory); None puts the whole model on `device`.
    """

    name: str
    source: ModelSource
    name_or_path: str | None = None
    gguf_file: str | None = None
    package: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    add_bos: bool | None = None
    device_map: str | None = None
    tiny_hidden_size: int = 64
    tiny_num_layers: int = 2
    tiny_seed: int = 0


@dataclass(frozen=True)
class ScoringConfig:
    """`logprob`: argmax of log P(letter | prompt); `generate`: greedy decoding, first letter.

    `prefix_cache` (both methods): run each subject's shared header + shots once and forward only
    each question's own tokens (and, generating, its decode steps) against the cached keys/values;
    false = the plain reference path. `max_new_tokens` (generate): the most tokens decoded; a row
    stops earlier once its first non-whitespace character is out.
    `calibration="mean"` subtracts each letter's mean log-prob over a subject's questions before
    the argmax (letter-bias normalisation); it is part of the scoring method's identity.
    """

    method: ScoringMethod
    max_new_tokens: int = 5
    calibration: Calibration = "none"
    prefix_cache: bool = True


@dataclass(frozen=True)
class DataConfig:
    """Where MMLU comes from: the packaged copy, the hub (`path` = dataset id) or a local dir."""

    name: str
    source: DataSource
    path: str | None = None
    revision: str | None = None


DEFAULT_DB_URL = "sqlite:///mmlu_track.db"


@dataclass(frozen=True)
class TrackingConfig:
    """Where each run is recorded.

    `db_url`: the project's SQL store (any SQLAlchemy URL). `mlflow_uri`: None = MLflow's own
    default (`MLFLOW_TRACKING_URI`, else a local `mlflow.db`). `resume`: continue the newest
    unfinished run with the same identity instead of starting over. `heartbeat_s`: how often a
    running process says it is alive; `dead_after_s`: a process silent that long counts as dead,
    wherever it ran (on the same machine a process that is gone counts as dead at once).
    """

    db_url: str = DEFAULT_DB_URL
    mlflow: bool = True
    mlflow_uri: str | None = None
    experiment: str = "mmlu_track"
    resume: bool = True
    heartbeat_s: float = 30.0
    dead_after_s: float = 150.0  # 5 missed beats: a busy machine may delay one beat, never five


@dataclass(frozen=True)
class EvalConfig:
    model: ModelConfig
    scoring: ScoringConfig
    data: DataConfig
    tracking: TrackingConfig = TrackingConfig()
    k: int = 5
    formulation: Formulation = "original"
    subjects: tuple[str, ...] = SUBJECTS
    limit: int | None = None
    seed: int = 1234
    shot_selection: ShotSelection = "first"
    batch_size: int = 64
    batch_tokens: int | None = 1024
    dtype: Dtype = "auto"
    device: str = "auto"
    max_length: int | None = None
    allow_truncation: bool = False
    cache_dir: str = "~/.cache/mmlu_track"
    shards: int = 1
    shard: int = 0
    gate: GateConfig | None = None  # the release policy of the sequential gate (gate.sequential=true)


CompareMode = Literal["gate", "fewshot_gap"]
Correction = Literal["holm", "fdr_bh"]


@dataclass(frozen=True)
class GateConfig:
    """A release policy. Pass when non-inferiority (margin δ) is shown and no drop is; fail as a
    regression when the overall drop is significant, as inconclusive when neither is shown; flag
    subjects significant after `correction` whose drop is >= `min_effect` (and fail on them too
    when `fail_on_flagged_subjects`). `warn_only` always exits 0. `promote_alias`: on a pass, point
    that alias of `registered_model` (default: the candidate's model name) at the candidate."""

    name: str
    alpha: float = 0.05
    margin: float = 0.01
    min_effect: float = 0.05
    correction: Correction = "holm"
    fail_on_flagged_subjects: bool = False
    warn_only: bool = False
    bootstrap_resamples: int = 2000
    seed: int = 0
    promote_alias: str | None = None
    registered_model: str | None = None
    # The sequential gate (`python -m mmlu_track ... gate.baseline=RUN gate.sequential=true`): the
    # evaluation is scored in `looks` looks and stops as soon as pass or regression is shown.
    baseline: str | None = None
    sequential: bool = False
    looks: int = 20


@dataclass(frozen=True)
class CompareConfig:
    """`python -m mmlu_track.compare`: a run is a SQL run id (or prefix), an MLflow run id, a model
    name (its latest finished run with the other side's settings) or `models:/<name>@<alias>`."""

    baseline: str
    candidate: str
    gate: GateConfig
    tracking: TrackingConfig = TrackingConfig()
    mode: CompareMode = "gate"
    compare_experiment: str = "mmlu_track_compare"


def _suggest(value: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(value, allowed, n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _convert(value: Any, hint: Any, key: str) -> Any:
    """Check `value` against a type hint of the dataclasses above and return it converted."""
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        options = get_args(hint)
        if value is None:
            if type(None) in options:
                return None
            raise ConfigError(f"{key} is required (got null)")
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0])
    if origin is Literal:
        allowed = tuple(str(a) for a in get_args(hint))
        if value not in allowed:
            raise ConfigError(
                f"{key}={value!r} is not allowed{_suggest(str(value), allowed)}; "
                f"choose one of: {', '.join(allowed)}"
            )
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key} must be a mapping, got {value!r}")
        return _dataclass_from_mapping(hint, value, f"{key}.")  # type: ignore[arg-type]
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {hint!r} for {key}")  # a bug here, not user input


def _dataclass_from_mapping(cls: type[Any], mapping: Mapping[str, Any], prefix: str) -> Any:
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(mapping) - names)
    if unknown:
        raise ConfigError(
            f"unknown key {prefix}{unknown[0]}{_suggest(unknown[0], tuple(names))}; "
            f"known keys: {', '.join(sorted(names))}"
        )
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        key = f"{prefix}{field.name}"
        if field.name not in mapping:
            has_default = (
                field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            )
            if not has_default:
                raise ConfigError(f"{key} is required")
            continue
        if field.name == "subjects":
            kwargs[field.name] = parse_subjects(mapping[field.name])
            continue
        kwargs[field.name] = _convert(mapping[field.name], hints[field.name], key)
    return cls(**kwargs)


def parse_subjects(value: Any) -> tuple[str, ...]:
    """`all`, one subject name, or a list of names -> a tuple of known subjects in given order."""
    if value == "all":
        return SUBJECTS
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not names:
        raise ConfigError(f"subjects must be 'all' or a non-empty list of subjects, got {value!r}")
    seen: list[str] = []
    for name in names:
        if name not in SUBJECTS:
            raise ConfigError(
                f"unknown subject {name!r}{_suggest(str(name), SUBJECTS)}; "
                f"allowed: 'all' or any of the 57 MMLU subjects ({SUBJECTS[0]}, {SUBJECTS[1]}, ...)"
            )
        if name not in seen:
            seen.append(name)
    return tuple(seen)


def _check_seed(key: str, seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{key}={seed} is out of range: allowed 0..2**63-1 ({MAX_SEED})")


def _check_values(cfg: EvalConfig) -> None:
    _check_seed("seed", cfg.seed)
    _check_seed("model.tiny_seed", cfg.model.tiny_seed)
    if not 0 <= cfg.k <= DEV_EXAMPLES_PER_SUBJECT:
        raise ConfigError(
            f"k={cfg.k} is impossible: the dev split has {DEV_EXAMPLES_PER_SUBJECT} examples "
            f"per subject; allowed: 0..{DEV_EXAMPLES_PER_SUBJECT}"
        )
    if cfg.limit is not None and cfg.limit < 1:
        raise ConfigError(f"limit={cfg.limit} must be >= 1, or null for every question")
    if cfg.shards < 1:
        raise ConfigError(f"shards={cfg.shards} must be >= 1")
    if not 0 <= cfg.shard < cfg.shards:
        raise ConfigError(f"shard={cfg.shard} must be in 0..{cfg.shards - 1} (shards={cfg.shards})")
    if cfg.shards > 1 and not cfg.tracking.resume:
        raise ConfigError(
            "shards > 1 needs tracking.resume=true: the shards find their one run by its identity"
        )
    t = cfg.tracking
    if not 0 < t.heartbeat_s <= t.dead_after_s / 2:
        raise ConfigError(
            f"tracking.heartbeat_s={t.heartbeat_s:g} must be above 0 and at most half of "
            f"tracking.dead_after_s={t.dead_after_s:g} (a process is taken as dead after missing beats)"
        )
    if cfg.batch_size < 1:
        raise ConfigError(f"batch_size={cfg.batch_size} must be >= 1")
    if cfg.batch_tokens is not None and cfg.batch_tokens < 1:
        raise ConfigError(f"batch_tokens={cfg.batch_tokens} must be >= 1, or null for batch_size alone")
    if cfg.max_length is not None and cfg.max_length < 16:
        raise ConfigError(f"max_length={cfg.max_length} must be >= 16, or null for the model's")
    if cfg.scoring.max_new_tokens < 1:
        raise ConfigError(f"scoring.max_new_tokens={cfg.scoring.max_new_tokens} must be >= 1")
    if cfg.scoring.calibration != "none" and cfg.scoring.method != "logprob":
        raise ConfigError("scoring.calibration applies to scoring=logprob only; set it to none")
    dev = cfg.device
    if not (dev in ("auto", "cpu", "cuda", "mps") or dev.startswith("cuda:")):
        raise ConfigError(f"device={dev!r} is not allowed; choose auto, cpu, cuda, cuda:N or mps")
    model = cfg.model
    if model.source in ("hub", "gguf") and not (model.name_or_path or model.package):
        raise ConfigError(f"model.name_or_path is required for model.source={model.source}")
    if model.device_map is not None and model.source != "hub":
        raise ConfigError(f"model.device_map applies to model.source=hub only, not {model.source}")
    if model.source == "gguf" and not model.gguf_file:
        raise ConfigError("model.gguf_file is required for model.source=gguf")
    if cfg.data.source in ("hub", "local") and not cfg.data.path:
        raise ConfigError(f"data.path is required for data.source={cfg.data.source}")


def compare_config_from_dict(raw: Mapping[str, Any]) -> CompareConfig:
    """Build and validate a `CompareConfig` from a resolved, plain mapping."""
    cfg: CompareConfig = _dataclass_from_mapping(CompareConfig, raw, "")
    if cfg.gate.sequential or cfg.gate.baseline is not None:
        raise ConfigError(
            "gate.sequential and gate.baseline belong to the evaluation: python -m mmlu_track model=... "
            "gate.baseline=RUN gate.sequential=true"
        )
    _check_gate(cfg.gate)
    return cfg


def _check_gate(g: GateConfig) -> None:
    # Every test of the gate is one-sided: at alpha > 0.5 a pass would need less than a coin flip's evidence.
    if not 0 < g.alpha <= 0.5:
        raise ConfigError(f"gate.alpha={g.alpha} must be in (0, 0.5]: a one-sided test level, 0.05 = 5 %")
    _check_seed("gate.seed", g.seed)
    if not 0 <= g.margin < 1:
        raise ConfigError(f"gate.margin={g.margin} must be in [0, 1): an accuracy difference, 0.01 = 1 point")
    if not 0 <= g.min_effect < 1:
        raise ConfigError(f"gate.min_effect={g.min_effect} must be in [0, 1): 0.05 = 5 points")
    if g.bootstrap_resamples < 0:
        raise ConfigError(f"gate.bootstrap_resamples={g.bootstrap_resamples} must be >= 0 (0 = no bootstrap)")


def _check_sequential(cfg: EvalConfig) -> None:
    g = cfg.gate
    if g is None or not (g.sequential or g.baseline is not None):
        return
    _check_gate(g)
    if g.baseline is None:
        raise ConfigError("gate.sequential=true needs gate.baseline=RUN: the stored run to gate against")
    if not g.sequential:
        raise ConfigError(
            "gate.baseline is read by the sequential gate: add gate.sequential=true, or compare after a full "
            "run with python -m mmlu_track.compare baseline=RUN candidate=RUN"
        )
    if g.margin <= 0:
        raise ConfigError(
            f"gate.sequential=true needs gate.margin > 0 (got {g.margin}): δ is what it bets on"
        )
    if not 2 <= g.looks <= 1000:
        raise ConfigError(f"gate.looks={g.looks} must be in 2..1000 (20 = a look every 5 % of the questions)")
    if cfg.shards > 1:
        raise ConfigError("gate.sequential=true runs unsharded (shards=1): each look needs every earlier one")
    if cfg.scoring.calibration != "none":
        raise ConfigError(
            "gate.sequential=true needs scoring.calibration=none: calibration needs whole subjects"
        )
    if g.warn_only or g.promote_alias:
        raise ConfigError(
            "gate.sequential=true gates only: warn_only and promote_alias apply to the compare command"
        )


def eval_config_from_dict(raw: Mapping[str, Any]) -> EvalConfig:
    """Build and validate an `EvalConfig` from a resolved, plain mapping (no omegaconf types)."""
    cfg: EvalConfig = _dataclass_from_mapping(EvalConfig, raw, "")
    _check_values(cfg)
    _check_sequential(cfg)
    return cfg


def identity_dict(cfg: EvalConfig) -> dict[str, Any]:
    """The settings that determine a run's results, beside `record.Protocol` (which `plan.identity`
    adds): not where it is cached or recorded, nor how it is batched (scores do not depend on
    batching, so a run that ran out of memory resumes with smaller batches), nor how it is sharded
    (all shards write into one run), nor the sequential gate (its stopped run the same command
    without it resumes; its own settings are checked by the gate when a run is resumed)."""
    out = to_dict(cfg)
    skip = ("tracking", "cache_dir", "batch_size", "batch_tokens", "shards", "shard", "gate")
    for key in skip:
        out.pop(key)
    return out


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config dataclass as stored and reported: a JSON-ready dict, every URL's password `***`."""
    return redact_doc(dataclasses.asdict(cfg))
