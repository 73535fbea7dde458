"""Typed, frozen configuration: the only shape of config that code below the entry point sees.

Every setting and its default, once. `cli` turns Hydra's composed `DictConfig` into a plain dict
once and calls `settings.checks.eval_config_from_dict`, which builds these and checks every value;
nothing else in the package imports hydra or omegaconf.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from mmlu_track.settings.subjects import SUBJECTS
from mmlu_track.support.credentials import redact_doc

ModelSource = Literal["hub", "gguf", "tiny", "fake", "openai_api"]
DataSource = Literal["packaged", "hub", "local"]
ScoringMethod = Literal["logprob", "generate"]
Calibration = Literal["none", "mean"]
# MMLU's: original, harness, question; MMLU-Pro's (`eval/prompts_pro.py`): leaderboard, category
Formulation = Literal[
    "original", "harness", "question", "leaderboard", "category", "cot_official", "cot_lm_eval"
]
Benchmark = Literal["mmlu", "mmlu_pro"]
# Each benchmark's formulations, by how they are scored (the one list the checks, the prompts and the
# importer read): MMLU's; MMLU-Pro's log-likelihood protocols; its chains of thought (scoring=cot).
MMLU_FORMULATIONS = ("original", "harness", "question")
PRO_FORMULATIONS = ("leaderboard", "category")
COT_FORMULATIONS = ("cot_official", "cot_lm_eval")
ChatStyle = Literal["none", "single_turn", "multiturn"]
Extract = Literal["first_char", "pattern", "cascade"]
Failed = Literal["wrong", "random"]
ShotSelection = Literal["first", "random"]
ChoiceOrder = Literal["as_given", "circular"]
GateMetric = Literal["accuracy", "circular"]
GateQuestions = Literal["all", "clean"]
Dtype = Literal["float32", "bfloat16", "float16", "auto"]

DEV_EXAMPLES_PER_SUBJECT = 5  # MMLU's dev split has exactly 5 per subject
DEFAULT_SEED = 1234
DEFAULT_MARGIN = 0.01  # gate.margin: δ, one point of micro accuracy
DEFAULT_ALPHA = 0.05  # gate.alpha
MAX_SEED = 2**63 - 1  # torch.manual_seed and numpy's generators overflow (a traceback) beyond 64 bits


@dataclass(frozen=True)
class ModelConfig:
    """Which causal LM to load and how.

    `source`: `hub` = a hub id or a local directory for `AutoModelForCausalLM`; `gguf` = a GGUF
    file (`gguf_file`) in `name_or_path`, or in the installed Python package `package`;
    `tiny` = a random-weight llama built from `tiny_*` with the packaged SmolLM2 tokenizer; `fake` =
    no weights and no torch, answers drawn from `tiny_seed` and each prompt (`eval.fake`: tests),
    each after `fake_seconds_per_question`.
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
    fake_seconds_per_question: float = 0.0  # the fake's pace: a run slow enough to interrupt
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
# Model sources whose weights are their seed, `model.tiny_seed` (a random model's; the fake's answers).
SEEDED_SOURCES = frozenset({"tiny", "fake"})
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
    # A generation ends at the first of these (checked on its decoded text); the text before it is
    # read. scoring=cot: ["Question:"].
    stop: tuple[str, ...] = ()
    # extract=cascade: a chain of thought no rule answers counts wrong, or is a guess seeded by
    # failed_seed and the question (the official script's random guess).
    failed: Failed = "wrong"
    failed_seed: int = 12345
    # as_given: each question once; circular: also in its 3 other cyclic rotations of the choices
    # (the gold letter moving with its text), for circular accuracy and consistency (4x the prompts).
    choice_order: ChoiceOrder = "as_given"


@dataclass(frozen=True)
class DataConfig:
    """Where MMLU comes from: the packaged copy, the hub (`path` = dataset id) or a local dir."""

    name: str
    source: DataSource
    path: str | None = None
    revision: str | None = None
    # MMLU-Redux annotations of which questions' keys are wrong (Gema et al. 2024): a hub id
    # (edinburgh-dawg/mmlu-redux-2.0) or a local file or folder of them (eval/annotations.py); the
    # run then reports accuracy on all questions and on those annotated ok.
    annotations: str | None = None


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
    unfinished run with the same identity instead of starting over, and take a finished one as it is
    (the same command again scores nothing); `rerun`: score again a run whose identity has a finished
    run, as a run of its own (labelled `rerun` in MLflow). `heartbeat_s`: how often a
    running process says it is alive; `dead_after_s`: a process silent that long counts as dead,
    wherever it ran (on the same machine a process that is gone counts as dead at once).
    """

    db_url: str = field(default=DEFAULT_DB_URL, metadata={"env": DB_URL_ENV})
    mlflow: bool = True
    mlflow_uri: str | None = None
    experiment: str = "mmlu_track"
    resume: bool = True
    rerun: bool = False
    heartbeat_s: float = 30.0
    dead_after_s: float = DEAD_AFTER_S  # see DEAD_AFTER_S


def env_default(cls: type[Any], name: str) -> Any:
    """A setting's default where its field names an environment variable (`metadata["env"]`): that
    variable's value where set, else the field's default. The one reader of such a variable outside
    Hydra, whose config node reads the same field's metadata (`commands.compose`): `runs --db`."""
    found = {f.name: f for f in dataclasses.fields(cls)}[name]
    env = found.metadata.get("env")
    return os.environ.get(env, found.default) if env else found.default


@dataclass(frozen=True)
class EvalConfig:
    """`python -m mmlu_track`: the knobs are top-level keys (`k=0 limit=10 formulation=harness`)."""

    model: ModelConfig
    scoring: ScoringConfig
    data: DataConfig
    tracking: TrackingConfig = TrackingConfig()
    k: int = 5  # shots from the dev split (0..5); dropped one by one if a prompt overflows max_length
    formulation: Formulation = "original"  # original (Hendrycks et al.) | harness | question (HELM style)
    # mmlu | mmlu_pro (benchmark=mmlu_pro: its categories as subjects, 2-10 options, formulation
    # leaderboard | category)
    benchmark: Benchmark = "mmlu"
    chat: ChatConfig = ChatConfig()  # chat=none (raw prompts) | single_turn | multiturn (its chat template)
    subjects: tuple[str, ...] = (
        SUBJECTS  # `all` (the benchmark's), one subject, or a list: 'subjects=[anatomy,virology]'
    )
    limit: int | None = None  # questions per subject (a seeded sample kept in source order); None = all
    seed: int = DEFAULT_SEED  # seeds python, numpy, torch, the question sample and random shot selection
    shot_selection: ShotSelection = "first"  # the k first dev rows (as the references do) | random
    shot_seed: int | None = None  # the seed of shot_selection=random apart from the sample's; None: seed
    batch_size: int = 64  # most questions per forward pass; scores do not depend on batching
    batch_tokens: int | None = 1024  # most padded tokens per forward pass (None: batch_size alone)
    # CPU threads of in-process scoring: auto = what this process may use (affinity, cgroup quota,
    # SLURM_CPUS_PER_TASK, OMP_NUM_THREADS) shared among a launch's shards on this host; or a number
    threads: int | Literal["auto"] = "auto"
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
    alpha: float = DEFAULT_ALPHA  # one-sided level of each test; two-sided intervals are 1 - alpha
    # δ: the largest drop in micro accuracy that still counts as "no worse"; auto (the compare
    # command): the smallest margin of the runs' protocol's stored noise measurement
    # (python -m mmlu_track.noise).
    margin: float | Literal["auto"] = DEFAULT_MARGIN
    min_effect: float = 0.05  # a subject is flagged only if it also drops by at least this (5 points)
    correction: Correction = "holm"  # across subjects: holm (family-wise) | fdr_bh (Benjamini-Hochberg)
    fail_on_flagged_subjects: bool = False
    warn_only: bool = False
    bootstrap_resamples: int = 2000  # subject-stratified paired bootstrap intervals; 0 = skip
    seed: int = 0  # of the bootstrap
    # What a question's outcome is: accuracy (correct as given) | circular (correct in all 4
    # rotations: both runs scoring.choice_order=circular).
    metric: GateMetric = "accuracy"
    # Which questions: all | clean (those MMLU-Redux annotates ok: both runs with the same
    # data.annotations).
    questions: GateQuestions = "all"
    promote_alias: str | None = None  # e.g. champion
    registered_model: str | None = None  # None: the candidate's model name
    # The sequential gate (`python -m mmlu_track ... gate.baseline=RUN gate.sequential=true`): the
    # evaluation is scored in `looks` looks and stops as soon as pass or regression is shown. Read by
    # the evaluation only (metadata `command`): the compare command refuses them (`EVAL_ONLY_GATE`).
    baseline: str | None = field(default=None, metadata={"command": "eval"})  # a run, as compare names one
    sequential: bool = field(default=False, metadata={"command": "eval"})
    looks: int = field(default=20, metadata={"command": "eval"})  # 20 = a look every 5 % of the questions

    @property
    def delta(self) -> float:
        """δ as a number: `margin=auto` is resolved (`gate.policy.auto_margin`) before it is read."""
        if isinstance(self.margin, str):
            raise ValueError("gate.margin=auto was read before it was resolved (a bug)")
        return self.margin

    def numeric(self) -> GateConfig:
        """This policy with a number for δ: `margin=auto`, not resolvable without a noise
        measurement (a command without one: the noise command itself), is the default margin."""
        return self if not isinstance(self.margin, str) else replace(self, margin=DEFAULT_MARGIN)


# The gate settings only the evaluation reads (its sequential gate): the one list of which gate
# setting belongs to which command (the compare command refuses these; its --help leaves them out).
EVAL_ONLY_GATE = tuple(f.name for f in dataclasses.fields(GateConfig) if f.metadata.get("command") == "eval")


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
    # A model name resolves to the model's evaluations only; true: to the noise command's runs too
    # (measurements of the protocol: a repeat, another batching, other shots, not versions of the model).
    noise_runs: bool = False


@dataclass(frozen=True)
class NoiseConfig:
    """`python -m mmlu_track.noise`: beside the evaluation's own settings, what it is run against:
    the same settings again, another batching, other few-shot examples (`shot_selection=random`
    under each of `shot_seeds`) and, only when named, another dtype."""

    shot_seeds: tuple[int, ...] = (1, 2, 3)  # 'noise.shot_seeds=[1,2,3,4,5]'; [] skips shot choice
    batch_size: int = 1  # the batching variant's; scores should not depend on it
    batch_tokens: int | None = None  # the batching variant's (None: batch_size alone)
    dtype: Dtype | None = None  # e.g. bfloat16: measure precision too (a team may or may not accept it)
    experiment: str = "mmlu_track_noise"  # the MLflow experiment of noise measurements


# Settings that apply to some model sources or scoring methods only (a flattened key -> when).
_APPLIES_TO_SOURCE = {
    **{f"model.{k}": ("tiny",) for k in ("tiny_hidden_size", "tiny_num_layers")},
    "model.tiny_seed": tuple(sorted(SEEDED_SOURCES)),
    "model.fake_seconds_per_question": ("fake",),
    **{
        f"model.{k}": tuple(SERVED_SOURCES)
        for k in (*SERVED_ONLY, "max_concurrency", "timeout_s", "max_retries", "top_logprobs")
    },
    "model.gguf_file": ("gguf",),
    "model.device_map": ("hub",),
    "model.trust_remote_code": ("hub",),
}
_APPLIES_TO_METHOD = {
    "scoring.max_new_tokens": "generate",
    "scoring.extract": "generate",
    "scoring.patterns": "generate",
    "scoring.stop": "generate",
    "scoring.failed": "generate",
    "scoring.failed_seed": "generate",
    "scoring.calibration": "logprob",
}


def applies(key: str, cfg: EvalConfig) -> bool:
    """Whether a flattened setting means anything for this run (`model.tiny_seed` does not for a
    GGUF model, nor `scoring.patterns` for log-prob scoring): what a run's page lists."""
    sources = _APPLIES_TO_SOURCE.get(key)
    method = _APPLIES_TO_METHOD.get(key)
    return (sources is None or cfg.model.source in sources) and (
        method is None or cfg.scoring.method == method
    )


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config dataclass as stored and reported: a JSON-ready dict, every URL's password `***`."""
    return redact_doc(dataclasses.asdict(cfg))
