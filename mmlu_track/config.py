"""Typed, frozen configuration: the only shape of config that code below the entry point sees.

`__main__` turns Hydra's composed `DictConfig` into a plain dict once and calls
`eval_config_from_dict`; nothing else in the package imports hydra or omegaconf.
Every value is checked here, and a bad one raises `ConfigError` with one line saying what is
wrong and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mmlu_track.credentials import redact_doc, remember_urls, unencoded_in_password
from mmlu_track.parsers import PARSERS
from mmlu_track.records.subjects import SUBJECTS
from mmlu_track.typed import ConfigError, from_mapping

ModelSource = Literal["hub", "gguf", "tiny", "openai_api"]
DataSource = Literal["packaged", "hub", "local"]
ScoringMethod = Literal["logprob", "generate"]
Calibration = Literal["none", "mean"]
Formulation = Literal["original", "harness", "question"]
ChatStyle = Literal["none", "single_turn", "multiturn"]
Extract = Literal["first_char", "pattern"]
ShotSelection = Literal["first", "random"]
Dtype = Literal["float32", "bfloat16", "float16", "auto"]

DEV_EXAMPLES_PER_SUBJECT = 5  # MMLU's dev split has exactly 5 per subject
MAX_SEED = 2**63 - 1  # torch.manual_seed and numpy's generators overflow (a traceback) beyond 64 bits


@dataclass(frozen=True)
class ModelConfig:
    """Which causal LM to load and how.

    `source`: `hub` = a hub id or a local directory for `AutoModelForCausalLM`; `gguf` = a GGUF
    file (`gguf_file`) in `name_or_path`, or in the installed Python package `package`;
    `tiny` = a random-weight llama built from `tiny_*` with the packaged SmolLM2 tokenizer.
    `add_bos`: None keeps the tokenizer's own choice; True/False forces a BOS token or none.
    `device_map` (hub models): `auto` lets accelerate spread a model too big for one GPU over the
    visible GPUs (then CPU memory); None puts the whole model on `device`.
    `openai_api`: a model served over the OpenAI-compatible HTTP API at `base_url` (its `/v1`),
    as `served_name`; its identity is that name plus the required `revision`, the user's word for
    the weights behind it (a server tells nothing of them). `tokenizer` (a folder or hub id) fits
    prompts (else the server's tokenize endpoint) and renders chat prompts (needed for `chat`).
    `api_key_env` names the environment variable holding the key (a key never sits in a config).
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
    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1
    served_name: str | None = None  # the model's id in the server's GET /v1/models
    tokenizer: str | None = None
    api_key_env: str | None = None  # e.g. OPENAI_API_KEY: sent as a bearer token
    max_concurrency: int = 8  # requests in flight at once
    timeout_s: float = 300.0  # one request's limit; a timed-out request is retried
    max_retries: int = 6  # tries after the first on 429, 5xx, resets and timeouts (back-off 1 s .. 60 s)
    top_logprobs: int = 20  # alternatives asked per next token (vLLM's --max-logprobs: 20 by default)


# Settings only a served model has (no default but None), refused for any other model.source.
SERVED_ONLY = ("base_url", "api_key_env", "served_name", "tokenizer")
# Model sources served by an inference engine (the rest run in this process, under torch).
SERVED_SOURCES = frozenset({"openai_api"})


def is_served(source: str) -> bool:
    """Whether a model of this `model.source` is served (HTTP) rather than run in this process."""
    return source in SERVED_SOURCES


# A process silent (no heartbeat) this long counts as dead wherever it ran: 5 missed beats of 30 s
# (a busy machine may delay one beat, never five). `tracking.dead_after_s`'s default.
DEAD_AFTER_S = 150.0


# How `scoring.extract=pattern` reads a letter: the first of these that matches, its one group the
# letter (`eval/answers.read_answer`). In order, with where each comes from:
ANSWER_PATTERNS = (
    r"(?i:answer is)\s*\(?([ABCD])\b",  # lm-eval 0.4.13 mmlu_pro's filter `answer is \(?([ABCDEFGHIJ])\)?`
    r"(?i:answer)[ \t]*:[ \t]*\(?\$?([ABCD])\b",  # OpenAI simple-evals ANSWER_PATTERN_MULTICHOICE
    r"\(([ABCD])\)",  # lm-eval mmlu_flan_cot_zeroshot's multi_choice_regex `(\([A-Z]\))`
    r"^\s*([ABCD])\b",  # a bare leading letter ("B", "B.", "B) ..."; not "An ...": the seed's protocol)
)


@dataclass(frozen=True)
class ScoringConfig:
    """`logprob`: argmax of log P(letter | prompt); `generate`: greedy decoding, first letter.

    `prefix_cache` (both methods): run each subject's shared header + shots once and forward only
    each question's own tokens (and, generating, its decode steps) against the cached keys/values;
    false = the plain reference path. `max_new_tokens` (generate): the most tokens decoded; a row
    stops earlier once its first non-whitespace character is out.
    `calibration="mean"` subtracts each letter's mean log-prob over a subject's questions before
    the argmax (letter-bias normalisation); it is part of the scoring method's identity.
    `extract` (generate): `first_char`, the first non-whitespace character (the seed's protocol;
    a row stops once it is out), or `pattern`, the first of `patterns` that matches the whole
    generation (a row decodes to `max_new_tokens` or its end: give it room for a sentence).
    """

    method: ScoringMethod
    max_new_tokens: int = 5
    extract: Extract = "first_char"
    patterns: tuple[str, ...] = ANSWER_PATTERNS  # 'scoring.patterns=["answer: ([ABCD])"]' (one group each)
    calibration: Calibration = "none"
    prefix_cache: bool = True


@dataclass(frozen=True)
class DataConfig:
    """Where MMLU comes from: the packaged copy, the hub (`path` = dataset id) or a local dir."""

    name: str
    source: DataSource
    path: str | None = None
    revision: str | None = None


@dataclass(frozen=True)
class ChatConfig:
    """How a prompt is put to the model. `none`: raw text ending in `Answer:` (the base-model
    protocol). `single_turn`: the formulation's header as the system message, the shots and the
    question in one user message; `multiturn`: each shot a user turn and an assistant turn with its
    letter (lm-eval's `--apply_chat_template` and `--fewshot_as_multiturn`). Both are rendered by
    the model's own chat template, with the generation prompt; the answer is the letter the
    assistant turn starts with (`"A"`, no space). `system`: text before the header in the system
    message (lm-eval's `--system_instruction`)."""

    style: ChatStyle = "none"
    system: str | None = None


DEFAULT_DB_URL = "sqlite:///mmlu_track.db"  # in the working directory
DB_URL_ENV = "MMLU_TRACK_DB_URL"  # the SQL store when tracking.db_url is not given


@dataclass(frozen=True)
class TrackingConfig:
    """Where each run is recorded.

    `db_url`: the project's SQL store (any SQLAlchemy URL). `mlflow_uri`: None = MLflow's own
    default (`MLFLOW_TRACKING_URI`, else a local `mlflow.db`). `resume`: continue the newest
    unfinished run with the same identity instead of starting over. `heartbeat_s`: how often a
    running process says it is alive; `dead_after_s`: a process silent that long counts as dead,
    wherever it ran (on the same machine a process that is gone counts as dead at once).
    """

    db_url: str = field(default=DEFAULT_DB_URL, metadata={"env": DB_URL_ENV})
    mlflow: bool = True
    mlflow_uri: str | None = None
    experiment: str = "mmlu_track"
    resume: bool = True
    heartbeat_s: float = 30.0
    dead_after_s: float = DEAD_AFTER_S  # see DEAD_AFTER_S


@dataclass(frozen=True)
class EvalConfig:
    """`python -m mmlu_track`: the knobs are top-level keys (`k=0 limit=10 formulation=harness`)."""

    model: ModelConfig
    scoring: ScoringConfig
    data: DataConfig
    tracking: TrackingConfig = TrackingConfig()
    k: int = 5  # shots from the dev split (0..5); dropped one by one if a prompt overflows max_length
    formulation: Formulation = "original"  # original (Hendrycks et al.) | harness | question (HELM style)
    chat: ChatConfig = ChatConfig()  # chat=none (raw prompts) | single_turn | multiturn (its chat template)
    subjects: tuple[str, ...] = SUBJECTS  # `all`, one subject, or a list: 'subjects=[anatomy,virology]'
    limit: int | None = None  # questions per subject (a seeded sample kept in source order); None = all
    seed: int = 1234  # seeds python, numpy, torch, the question sample and random shot selection
    shot_selection: ShotSelection = "first"  # the k first dev rows (as the references do) | random
    batch_size: int = 64  # most questions per forward pass; scores do not depend on batching
    batch_tokens: int | None = 1024  # most padded tokens per forward pass (None: batch_size alone)
    dtype: Dtype = "auto"  # auto: float32 on a CPU, bfloat16 on a GPU; lower precision moves scores
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N | mps
    max_length: int | None = None  # context limit in tokens; None = the model's own
    allow_truncation: bool = False  # a prompt too long even with 0 shots stops the run; true: its last tokens
    # Converted GGUF models and tokenizers live here.
    cache_dir: str = field(default="~/.cache/mmlu_track", metadata={"env": "MMLU_TRACK_CACHE"})
    shards: int = 1  # split this run's work into N shards (one per GPU or machine), all into one run
    shard: int = 0  # which shard this process scores (0..shards-1): -m 'shard=range(4)' shards=4
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
    alpha: float = 0.05  # one-sided level of each test; two-sided intervals are 1 - alpha
    margin: float = 0.01  # δ: the largest drop in micro accuracy that still counts as "no worse"
    min_effect: float = 0.05  # a subject is flagged only if it also drops by at least this (5 points)
    correction: Correction = "holm"  # across subjects: holm (family-wise) | fdr_bh (Benjamini-Hochberg)
    fail_on_flagged_subjects: bool = False
    warn_only: bool = False
    bootstrap_resamples: int = 2000  # subject-stratified paired bootstrap intervals; 0 = skip
    seed: int = 0  # of the bootstrap
    promote_alias: str | None = None  # e.g. champion
    registered_model: str | None = None  # None: the candidate's model name
    # The sequential gate (`python -m mmlu_track ... gate.baseline=RUN gate.sequential=true`): the
    # evaluation is scored in `looks` looks and stops as soon as pass or regression is shown.
    baseline: str | None = None  # id or prefix, MLflow run id, model name, models:/<name>@<alias>
    sequential: bool = False
    looks: int = 20  # looks over the questions (20 = every 5 %); each covers the subjects in proportion


@dataclass(frozen=True)
class CompareConfig:
    """`python -m mmlu_track.compare`: a run is a SQL run id (or prefix), an MLflow run id, a model
    name (its latest finished run with the other side's settings) or `models:/<name>@<alias>`."""

    baseline: str
    candidate: str
    gate: GateConfig
    tracking: TrackingConfig = TrackingConfig()
    mode: CompareMode = "gate"  # gate (release verdict, exit 0/1) | fewshot_gap (k-shot vs 0-shot analysis)
    compare_experiment: str = "mmlu_track_compare"  # the MLflow experiment of comparisons


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
    if cfg.scoring.extract != "first_char" and cfg.scoring.method != "generate":
        raise ConfigError("scoring.extract reads generations: it applies to scoring=generate only")
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
    _check_served(model)
    _check_chat(cfg)
    if cfg.data.source in ("hub", "local") and not cfg.data.path:
        raise ConfigError(f"data.path is required for data.source={cfg.data.source}")


def _check_chat(cfg: EvalConfig) -> None:
    if cfg.chat.style == "none":
        if cfg.chat.system is not None:
            raise ConfigError(
                "chat.system is the system message of a chat prompt: set chat=single_turn or chat=multiturn"
            )
        return
    if cfg.model.source == "openai_api" and cfg.model.tokenizer is None:
        raise ConfigError(
            f"chat={cfg.chat.style} with a served model needs model.tokenizer= (a local folder or hub id of "
            "the served model's tokenizer): its chat template renders the prompts this run records"
        )
    if cfg.chat.system is not None and not cfg.chat.system.strip():
        raise ConfigError("chat.system is empty: give the system message's text, or leave it null")


def _check_served(model: ModelConfig) -> None:
    if model.source != "openai_api":
        given = [k for k in SERVED_ONLY if getattr(model, k) is not None]
        if given:
            raise ConfigError(f"model.{given[0]} applies to model.source=openai_api only, not {model.source}")
        return
    for key in ("base_url", "served_name", "revision"):
        if not getattr(model, key):
            why = " (the weights behind the served name, e.g. a commit or a file's sha256)" * (
                key == "revision"
            )
            raise ConfigError(f"model.{key} is required for model.source=openai_api{why}")
    url = model.base_url or ""
    parts = urllib.parse.urlsplit(url)
    if not url.startswith(("http://", "https://")) or not parts.hostname:
        raise ConfigError(
            f"model.base_url={url!r} must be an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1"
        )
    if unencoded_in_password(url):  # the URL would end inside the password: never half-parsed
        raise ConfigError(
            "model.base_url's password holds / ? or #: write them percent-encoded (%2F %3F %23)"
        )
    try:
        parts.port  # noqa: B018 -- parsing the port is the check
    except ValueError:
        raise ConfigError("model.base_url has no usable port (a number up to 65535 after the host)") from None
    if model.max_concurrency < 1:
        raise ConfigError(f"model.max_concurrency={model.max_concurrency} must be >= 1")
    if not 0 < model.timeout_s < math.inf:
        raise ConfigError(f"model.timeout_s={model.timeout_s:g} must be a finite number of seconds above 0")
    if model.max_retries < 0:
        raise ConfigError(f"model.max_retries={model.max_retries} must be >= 0")
    if model.top_logprobs < 1:
        raise ConfigError(f"model.top_logprobs={model.top_logprobs} must be >= 1")


def compare_config_from_dict(raw: Mapping[str, Any]) -> CompareConfig:
    """Build and validate a `CompareConfig` from a resolved, plain mapping."""
    remember_urls(dict(raw))  # its URLs' passwords are masked wherever they appear from now on
    cfg: CompareConfig = from_mapping(CompareConfig, raw, parsers=PARSERS)
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
    remember_urls(dict(raw))  # its URLs' passwords are masked wherever they appear from now on
    cfg: EvalConfig = from_mapping(EvalConfig, raw, parsers=PARSERS)
    _check_values(cfg)
    _check_sequential(cfg)
    return cfg


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config dataclass as stored and reported: a JSON-ready dict, every URL's password `***`."""
    return redact_doc(dataclasses.asdict(cfg))
