"""A newcomer's first commands (issue 38), through the real entry points in-process: what `--help`
says, what a refused command leaves behind, what git sees after a run, what an error tells to do."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from mmlu_track.commands.cli import plain
from mmlu_track.settings.config import EVAL_ONLY_GATE
from mmlu_track.settings.subjects import SUBJECTS
from mmlu_track.settings.typed import flatten
from mmlu_track.store.sql import SqlStore

from ..conftest import CONF_DIR, ROOT, CliResult, synthetic_run

Cli = Callable[..., CliResult]

# The sequential gate's keys: the evaluation's, in compare's config only because GateConfig holds them.
EVAL_ONLY = {f"gate.{key}" for key in EVAL_ONLY_GATE}  # the one list: settings.config


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _section(help_text: str, title: str) -> list[str]:
    """The lines of one `== title ... ==` section of a help text, up to its first blank line."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {title}"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start + 1 : end]


def _groups(help_text: str) -> dict[str, list[str]]:
    return {
        name: [o.strip() for o in options.split(",")]
        for name, _, options in (line.partition(":") for line in _section(help_text, "Groups"))
    }


# 3. --help ------------------------------------------------------------------------------------------


def test_help_opens_with_what_the_evaluation_does(cli: Cli, tmp_path: Path) -> None:
    got = cli("eval", "--help", cwd=tmp_path)
    assert got.code == 0, got.err
    assert got.out.startswith("python -m mmlu_track [group=option ...] [key=value ...]\n")
    assert "Evaluates a language model on MMLU" in got.out
    assert "powered by Hydra" not in got.out
    groups = ("benchmark", "chat", "data", "experiment", "gate", "model", "scoring", "tracking")
    assert _groups(got.out) == {g: _options(g) for g in groups}
    assert "k: 5" in _section(got.out, "Keys")  # each key with its default
    assert list(tmp_path.iterdir()) == []  # help runs nothing


def test_noise_help_says_what_the_noise_command_does(cli: Cli, tmp_path: Path) -> None:
    """It opened with the evaluation's header ("Evaluates a language model…")."""
    got = cli("noise", "--help", cwd=tmp_path)
    assert got.code == 0, got.err
    assert got.out.startswith("python -m mmlu_track.noise [evaluation settings ...] [noise.key=value ...]\n")
    assert "Measures the evaluation's own noise" in got.out
    assert "Evaluates a language model" not in got.out
    assert list(tmp_path.iterdir()) == []


def test_compare_help_lists_only_its_own_groups_and_keys(cli: Cli, tmp_path: Path) -> None:
    got = cli("compare", "--help", cwd=tmp_path)
    assert got.code == 0, got.err
    assert got.out.startswith("python -m mmlu_track.compare baseline=RUN candidate=RUN")
    assert "The release gate" in got.out
    assert "powered by Hydra" not in got.out
    # Its groups: those of compare.yaml's defaults list, each with every option conf/ has.
    defaults = yaml.safe_load((CONF_DIR / "compare.yaml").read_text())["defaults"]
    own = [next(iter(d)) for d in defaults if isinstance(d, dict)]
    assert _groups(got.out) == {g: _options(g) for g in own}
    # Its keys: the composed config's, less the policy's name (the option chosen) and the
    # evaluation's sequential gate.
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        keys = set(flatten(plain(compose(config_name="compare", overrides=["baseline=a", "candidate=b"]))))
    listed = {word for line in _section(got.out, "Keys") for word in line.split()}
    assert listed == keys - EVAL_ONLY - {"gate.name"}
    assert list(tmp_path.iterdir()) == []


# 1. A refused command leaves no folder ------------------------------------------------------------


@pytest.mark.parametrize(
    ("which", "args", "message"),
    [
        ("compare", ["baseline=a", "candidate=b"], "no results database at"),  # none is created
        ("compare", ["baseline=a", "candidate=b", "gate.alpha=3"], "gate.alpha=3.0 must be in (0, 0.5]"),
        ("compare", ["baseline=a"], "Missing mandatory value: candidate"),
        ("eval", ["model=tiny", "k=9"], "k=9 is impossible"),
        ("eval", ["model=tiny", "data=local", "data.path=missing"], "does not exist"),  # and no store.db
        ("noise", ["model=tiny", "data=local", "data.path=missing"], "does not exist"),  # its one store too
        # refused while the model loads: before, each left outputs/.../.hydra and an empty store.db
        ("eval", ["model=tiny", "cache_dir=/proc/mmlu_track_nope"], "cannot write the converted-model cache"),
        ("eval", ["model=hf_hub", "model.name_or_path=/nonexistent/m"], "'/nonexistent/m': no such folder"),
        # Hydra's own refusals come before it makes a folder
        ("compare", ["baseline=a", "candidate=b", "gate=lenient"], "Could not find 'gate/lenient'"),
        ("eval", ["model=tiny", "margn=1"], "unknown key 'margn': did you mean gate.margin?"),
    ],
)
def test_a_refused_command_leaves_no_folder(
    cli: Cli, tmp_path: Path, which: str, args: list[str], message: str
) -> None:
    (tmp_path / "outputs").mkdir()  # there before: stays, as every folder that was
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"
    got = cli(which, db, "tracking.mlflow=false", *args, cwd=tmp_path)
    assert got.code == 2
    assert message in got.err
    assert [p.name for p in tmp_path.iterdir()] == ["outputs"]  # no store.db either
    assert list((tmp_path / "outputs").iterdir()) == []


def test_ctrl_c_while_the_model_loads_leaves_no_folder(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted before anything was recorded (the model loading: Ctrl-C raised where it would
    land): exit 130, one line, and neither an output folder nor a store left behind."""
    from mmlu_track.eval import load

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(load, "load_backend", interrupted)
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"
    got = cli("eval", db, "tracking.mlflow=false", "model=tiny", cwd=tmp_path)
    assert got.code == 130
    assert got.err.strip().splitlines() == ["mmlu_track: interrupted; run the same command to resume"]
    assert list(tmp_path.iterdir()) == []  # before: outputs/<date>/<time>/.hydra


def test_an_unreachable_store_or_a_run_folder_that_cannot_be_made_is_one_line_and_leaves_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    server = "tracking.db_url=postgresql://u:p@127.0.0.1:1/x"  # nothing listens on port 1
    got = cli("eval", "model=tiny", "tracking.mlflow=false", server, cwd=tmp_path)
    assert got.code == 2
    assert len(got.errors) == 1
    assert "cannot be opened" in got.errors[0]
    assert list(tmp_path.iterdir()) == []  # before: outputs/<date>/<time>/.hydra
    # /proc: permissions say writable, the filesystem says no (before: 24 lines of Hydra's tracebacks)
    got = cli("eval", "model=tiny", "hydra.run.dir=/proc/mmlu_track_nope/x", cwd=tmp_path)
    assert got.code == 2
    assert got.errors == [
        "mmlu_track: error: hydra.run.dir=/proc/mmlu_track_nope/x cannot be created: No such file or "
        "directory; choose a writable folder"
    ]
    assert list(tmp_path.iterdir()) == []
    # An MLflow SQLite file in a folder that does not exist: refused, no folder made (before: made)
    ml = tmp_path.parent / f"{tmp_path.name}-mlflow-none"
    got = cli("eval", "model=tiny", f"tracking.mlflow_uri=sqlite:///{ml / 'mlflow.db'}", cwd=tmp_path)
    assert got.code == 2
    assert got.errors == [
        f"mmlu_track: error: the MLflow store's folder {ml} does not exist: create it, or give "
        "tracking.mlflow_uri a file in an existing folder"
    ]
    assert not ml.exists()
    assert list(tmp_path.iterdir()) == []
    # A folder made for the check is taken away again: Hydra makes it, as it always did.
    got = cli("eval", "model=tiny", "k=9", f"hydra.run.dir={tmp_path / 'a' / 'b'}", cwd=tmp_path)
    assert got.code == 2
    assert list(tmp_path.iterdir()) == []


def test_a_refused_command_keeps_a_folder_that_was_there_or_holds_more(cli: Cli, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    there = tmp_path / "there"
    there.mkdir()
    got = cli("eval", "model=tiny", "k=9", f"hydra.run.dir={there / 'new' / 'run'}", cwd=tmp_path)
    assert got.code == 2
    assert list(there.iterdir()) == []  # the folders made for the run went, not the one named
    # A comparison refused after its reports are written (promoting a run MLflow does not have)
    # keeps them.
    store = SqlStore(db)
    same = {s: [True, False] * 25 for s in SUBJECTS}  # two runs that answer alike: a pass
    base, cand = (synthetic_run(store, name, same) for name in ("m-base", "m-cand"))
    folder = tmp_path / "cmp"
    runs = (f"baseline={base}", f"candidate={cand}")
    promote = ("gate.promote_alias=champion", f"hydra.run.dir={folder}")
    got = cli("compare", f"tracking.db_url={db}", "tracking.mlflow=false", *runs, *promote, cwd=tmp_path)
    assert got.code == 2, got.out
    assert "cannot promote" in got.errors[0]
    assert (folder / "report.md").is_file()
    assert (folder / ".hydra" / "config.yaml").is_file()
    # A folder named that was there stays, even holding only what Hydra writes.
    named = tmp_path / "named"
    named.mkdir()
    got = cli("eval", "model=tiny", "k=9", f"hydra.run.dir={named}", cwd=tmp_path)
    assert got.code == 2
    assert (named / ".hydra" / "config.yaml").is_file()


# 2. What git sees after a run -------------------------------------------------------------------


def test_a_run_and_a_comparison_leave_nothing_for_git_to_show(cli: Cli, tmp_path: Path) -> None:
    """Run from a checkout (the project's .gitignore), with the default stores and folders."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    smoke = ("experiment=smoke", "device=cpu", "subjects=anatomy", "limit=2")
    for batch in (1, 2):  # two runs of one model, one compared with the other
        run = cli("eval", *smoke, f"batch_size={batch}", "tracking.rerun=true", cwd=tmp_path)
        assert run.code == 0, run.err
    compare = cli("compare", "baseline=tiny-random-llama", "candidate=tiny-random-llama", cwd=tmp_path)
    assert compare.code in (0, 1), compare.err
    assert git("status", "--porcelain", "--untracked-files=all") == "?? .gitignore\n"
    # What SQLite and the MLflow store's lock leave beside a database while in use, or when killed.
    ends = ("-journal", "-wal", "-shm", ".lock")
    companions = [f"{db}{end}" for db in ("mmlu_track.db", "mlflow.db") for end in ends]
    ignored = git("check-ignore", "--no-index", *companions).split()
    assert ignored == companions


# 5. An error names the side to name by id -------------------------------------------------------


def test_a_model_name_with_no_other_run_asks_for_that_sides_run_id(cli: Cli, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    only = synthetic_run(SqlStore(db), "m", {"anatomy": [True, False, True]})

    def compare(baseline: str, candidate: str) -> CliResult:
        return cli("compare", f"tracking.db_url={db}", "tracking.mlflow=false", f"baseline={baseline}",
                   f"candidate={candidate}", f"hydra.run.dir={tmp_path / 'cmp'}", cwd=tmp_path)  # fmt: skip

    named_candidate = compare(only, "m")  # the candidate is the name: the candidate needs an id
    assert named_candidate.code == 2
    assert f"has no finished run but the baseline run {only[:12]} itself" in named_candidate.errors[0]
    assert "name the candidate by its run id" in named_candidate.errors[0]
    named_baseline = compare("m", only)
    assert named_baseline.code == 2
    assert "name the baseline by its run id" in named_baseline.errors[0]


def test_a_compare_against_a_store_that_is_not_there_creates_none(cli: Cli, tmp_path: Path) -> None:
    """It created an empty SQLite file, then said "unknown run": now one line naming the file."""
    missing = tmp_path / "nowhere.db"
    got = cli(
        "compare",
        "baseline=a",
        "candidate=b",
        f"tracking.db_url=sqlite:///{missing}",
        "tracking.mlflow=false",
        cwd=tmp_path,
    )
    assert got.code == 2
    assert f"no results database at {missing}" in got.err
    assert not missing.exists()
