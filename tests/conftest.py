"""Shared fixtures: configs composed from the real conf/ folder, and a tiny real transformers model."""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hydra import compose, initialize_config_dir

from mmlu_track.commands.cli import plain
from mmlu_track.records.results import Accuracies
from mmlu_track.records.run import RunRecord, RunStart
from mmlu_track.settings.checks import eval_config_from_dict
from mmlu_track.settings.config import EvalConfig

from .serve import (
    start_mlflow_server,
    start_postgres,
    stop_postgres,
    stop_started,
)
from .shared_service import built_once, shared, workers_root

ROOT = Path(__file__).resolve().parent.parent
# The team's shared folder (offline assets, real data files as published): beside the checkout, as
# on CI's machines, or where MMLU_TRACK_SHARED names it; a test that needs it says so where it is missing.
SHARED_DIR = Path(os.environ.get("MMLU_TRACK_SHARED") or ROOT.parent / "shared")


def unavailable(why: str) -> NoReturn:
    """Fail in CI (`.ci/run` installs every tool, its machines keep the shared folder: a skip there
    hides a missing step), skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def require_shared(path: Path) -> None:
    """`unavailable` when `path` of the shared folder is missing (a clone outside the team's machines)."""
    if not path.is_file():
        unavailable(f"the shared folder's {path.name} is not here ({path})")


CONF_DIR = ROOT / "conf"


def compose_raw(overrides: list[str]) -> dict[str, Any]:
    """conf/eval.yaml composed by Hydra with `overrides`, as a plain dict."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return plain(compose(config_name="eval", overrides=overrides))


def compose_eval(overrides: list[str]) -> EvalConfig:
    """The typed, frozen config of these overrides: composed once per worker for each list (a
    composition costs ~0.1 s, and the synthetic runs ask for the same few hundreds of times)."""
    return _typed(tuple(overrides))


@functools.cache
def _typed(overrides: tuple[str, ...]) -> EvalConfig:
    return eval_config_from_dict(compose_raw(list(overrides)))


def pytest_configure(config: pytest.Config) -> None:
    # Bytecode written and reused (__pycache__, ignored by git) by this run and every process it
    # starts, whatever the environment says: under PYTHONDONTWRITEBYTECODE=1 (this machine's, and
    # many images') each process compiled every mmlu_track module and test module anew (a tenth of
    # the whole run's CPU, py-spy).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    # One converted-model cache for the xdist workers and every process they start: converting the
    # packaged GGUF costs 10 s (tokenizer) and 30 s (model) of CPU, paid once per test run, not per worker.
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    # One OpenMP thread per process: the workers (one per core) and the processes they start each
    # ran torch with one thread per core, oversubscribed, the idle ones spinning. Measured on this
    # 2-core machine, whole default run: 785 s -> 704 s, CPU 1155 s -> 1056 s. Set it to override.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if os.environ.get("MMLU_TRACK_TEST_CACHE"):
        return
    shared = tempfile.mkdtemp(prefix="mmlu_track-test-cache-")
    os.environ["MMLU_TRACK_TEST_CACHE"] = shared
    config.add_cleanup(lambda: shutil.rmtree(shared, ignore_errors=True))
    config.add_cleanup(lambda: os.environ.pop("MMLU_TRACK_TEST_CACHE", None))


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One converted-model cache for the whole session, never the user's home."""
    path = Path(os.environ.get("MMLU_TRACK_TEST_CACHE") or tmp_path_factory.mktemp("cache"))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MMLU_TRACK_CACHE", str(path))
        yield path


@pytest.fixture(scope="session")
def tiny_cfg(cache_dir: Path) -> EvalConfig:
    return compose_eval(["model=tiny", "device=cpu"])


@pytest.fixture(scope="session")
def tiny_lm(tiny_cfg: EvalConfig) -> Any:
    from mmlu_track.eval import models

    return models.load_model(tiny_cfg)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than the cores this process may use (`--maxprocesses` caps it).
    About a tenth of the suite waits with its core idle (deliberate time-outs, servers' answers,
    the clusters' schedulers): on a 2-core machine a third worker fills it (294 s against 315 s,
    the same tests one run after the other, 2026-12-06)."""
    return len(os.sched_getaffinity(0)) + 1


# The opt-in tiers (pyproject.toml's markers) a test joins by asking for one of these fixtures,
# however indirectly: a test that starts a service is in its tier whether or not it says so.
TIER_FIXTURES = {
    "services": {"postgres_server", "mlflow_server"},
    "servers": {"server", "cpp_server", "any_server"},  # any_server asks for the others by name
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        asked = set(getattr(item, "fixturenames", ()))
        for tier, fixtures in TIER_FIXTURES.items():
            if asked & fixtures:
                item.add_marker(tier)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu"):
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs CUDA")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def tiny_run_cfg(db_url: str, *overrides: str, model: str = "fake") -> EvalConfig:
    """The smoke preset on `model` (the fake one unless the model is the point: `model="tiny"`),
    recorded in `db_url` only (no MLflow) unless overrides say otherwise."""
    return compose_eval(
        ["experiment=smoke", f"model={model}", "device=cpu", "tracking=sql_only", f"tracking.db_url={db_url}",
         *overrides]
    )  # fmt: skip


def synthetic_run(
    store: Any,
    model: str,
    correct: dict[str, list[bool]],
    *,
    k: int = 5,
    fingerprint: str = "f" * 64,
    formulation: str = "original",
    calibration: str = "none",
    dtype: str | None = None,
    extra: tuple[str, ...] = (),
) -> str:
    """A finished run written straight into a store, with the given correctness per question
    (loaded in float32, or in `dtype=` asked for; `extra`: more overrides)."""
    from mmlu_track.records.results import QuestionResult, aggregate

    cfg = compose_eval(
        ["model=tiny", f"k={k}", f"formulation={formulation}", f"scoring.calibration={calibration}"]
        + ([f"dtype={dtype}"] if dtype else [])
        + list(extra)
    )
    start = synthetic_start(cfg, model, fingerprint, sum(map(len, correct.values())))
    # A hex identity, as a real run's: PostgreSQL's advisory lock is keyed by its first 15 digits.
    run_id, _ = store.start_or_resume(start, os.urandom(32).hex())
    results = []
    for subject, flags in correct.items():
        rows = [
            QuestionResult(
                subject, i, "h", k, 10, False, (-1.0, -2.0, -2.0, -2.0), None, 0 if ok else 1, 0, 1.0
            )
            for i, ok in enumerate(flags)
        ]
        store.save_unit(run_id, rows)
        results += rows
    store.finish(synthetic_record(run_id, cfg, model, fingerprint, aggregate(results)))
    return str(run_id)


def synthetic_start(cfg: EvalConfig | None = None, model: str = "m", fingerprint: str = "f" * 64,
                    n_questions: int = 10) -> RunStart:  # fmt: skip
    """What a run of `model` records as it starts (weights revision r1, dev rows "d", template "t")."""
    from mmlu_track.records.run import DataInfo, HostInfo, ModelInfo

    cfg = cfg or compose_eval(["model=tiny"])
    dtype = cfg.dtype if cfg.dtype != "auto" else "float32"
    info = ModelInfo(model, "tiny", model, "r1", None, dtype, "cpu", 2048, False, 49152, 1)
    return RunStart(
        config=cfg, model=info, data=DataInfo("packaged", None, fingerprint, "d", n_questions),
        template_hash="t", example_prompt="?", seeds={"python": cfg.seed}, versions={}, git_commit=None,
        host=HostInfo("test", "test", ()),
    )  # fmt: skip


def synthetic_record(
    run_id: str, cfg: EvalConfig, model: str, fingerprint: str, scores: Accuracies
) -> RunRecord:
    """A complete record for a run whose results were written straight into a store."""
    from mmlu_track.records.run import Timing

    start = synthetic_start(cfg, model, fingerprint, scores.micro.n)
    return RunRecord(run_id, start, {cfg.k: scores.micro.n}, 0, 0, 0, Timing(0, 0, 0, 0, 0, 0, 0), scores)


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str

    @property
    def errors(self) -> list[str]:
        """The `mmlu_track: error:` lines on stderr."""
        return [line for line in self.err.splitlines() if line.startswith("mmlu_track: error")]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """The real entry points called in-process with argv (no interpreter start-up to pay):
    `cli("compare", "baseline=..", cwd=DIR)`; entry points "eval", "compare" or "runs"."""
    from mmlu_track.commands import cli as entry
    from mmlu_track.commands import runs

    mains: dict[str, Callable[[], object]] = {
        "eval": entry.main,
        "compare": entry.compare_main,
        "noise": entry.noise_main,
        "runs": lambda: sys.exit(runs.main(sys.argv[1:])),
    }

    def call(which: str, *argv: str, cwd: Path, env: dict[str, str] | None = None) -> CliResult:
        capsys.readouterr()
        with monkeypatch.context() as m:
            m.chdir(cwd)
            m.setattr(sys, "argv", [which, *argv])
            m.delenv("HYDRA_FULL_ERROR", raising=False)
            for key, value in (env or {}).items():
                m.setenv(key, value)
            try:
                mains[which]()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        got = capsys.readouterr()
        return CliResult(code, got.out, got.err)

    return call


@pytest.fixture(scope="session")
def _empty_mlflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow SQLite store, made by MLflow itself once for all workers (its schema: ~1 s)."""

    def build(path: Path) -> None:
        import warnings

        from mlflow.tracking import MlflowClient

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()

    return built_once(workers_root(tmp_path_factory), "mlflow-empty.db", build)


@pytest.fixture
def mlflow_store(tmp_path: Path, _empty_mlflow_db: Path) -> str:
    """tmp_path/mlflow.db (also where a run started in tmp_path puts MLflow's default store) as a
    copy of an empty store: for the tests that log to MLflow without testing a store's creation
    (`store/mlflow/test_client.py`, `test_live.py` and the launch tests create theirs)."""
    shutil.copyfile(_empty_mlflow_db, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real `mlflow server` on 127.0.0.1 (SQLite backend) for the whole run, all workers
    (`shared_service.py`): tests that need an empty experiment name their own
    (`tracking.experiment=...`)."""
    with shared(workers_root(tmp_path_factory), "mlflow", start_mlflow_server, stop_started) as service:
        yield service["uri"]


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway PostgreSQL cluster for the session (MMLU_TRACK_TEST_PG_URL: an existing server)."""
    if url := os.environ.get("MMLU_TRACK_TEST_PG_URL"):
        yield url
        return
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin"))  # Debian's layout, not on PATH
    path = os.pathsep.join([os.environ.get("PATH", ""), *map(str, installed)])
    initdb, pg_ctl = shutil.which("initdb", path=path), shutil.which("pg_ctl", path=path)
    if not (initdb and pg_ctl):
        unavailable("no PostgreSQL server binaries (initdb, pg_ctl): install Debian's postgresql")
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            unavailable("running as root and there is no 'postgres' user: install Debian's postgresql")
        as_user = ["runuser", "-u", "postgres", "--"]

    # One cluster for all workers (each test makes a database of its own: `postgres_url`).
    start = functools.partial(start_postgres, initdb=initdb, pg_ctl=pg_ctl, as_user=as_user)
    with shared(workers_root(tmp_path_factory), "postgres", start, stop_postgres) as service:
        yield service["url"]


@pytest.fixture
def postgres_url(postgres_server: str, request: pytest.FixtureRequest) -> str:
    """An empty database of its own on the session's PostgreSQL server."""
    import psycopg
    from sqlalchemy.engine import make_url

    # The cluster serves every worker: the worker's name keeps two tests' databases apart.
    test = "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    name = f"t_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{test}"
    url = make_url(postgres_server)
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.set(database=name).render_as_string(hide_password=False)


LM_EVAL_DATA = Path(__file__).resolve().parent / "data" / "lm_eval"  # real lm-eval output (its make.py)


def import_lm_eval(cli: Callable[..., CliResult], cwd: Path, db: str, *args: str) -> CliResult:
    """`python -m mmlu_track.runs --db DB import ARGS --no-mlflow`, in-process."""
    return cli("runs", "--db", db, "import", *args, "--no-mlflow", cwd=cwd)


def question_results(db: str, run_id: str) -> list[Any]:
    """A stored run's question results (`QuestionResult`s) from the store at `db`."""
    from mmlu_track.store.sql import SqlStore

    with contextlib.closing(SqlStore(db)) as store:
        return store.question_results(run_id)


def stored_runs(db: str) -> list[Any]:
    """Every run in the store at `db` (`StoredRun`s), newest first."""
    from mmlu_track.store.sql import SqlStore

    with contextlib.closing(SqlStore(db)) as store:
        return store.runs(limit=1000)
