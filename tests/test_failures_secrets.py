"""No secret leaves the process: a password in `tracking.db_url` or `tracking.mlflow_uri` reaches no
message, file, stored row, MLflow param, tag or artifact; a credentialed MLflow URL works; and a run
is synced to the MLflow it was started with (its URI resolved at the start), failing with exit 2.

Through the real command line, in-process (the `cli` fixture), against a real PostgreSQL and a real
`mlflow server` (the session's `mlflow_server` fixture, tests/conftest.py)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from mmlu_track.store.sql import SqlStore
from mmlu_track.support.credentials import redact, redact_text, strip_userinfo

from .conftest import CliResult, synthetic_run

DB_SECRET = "s3cretpw-db-7Hq"
ML_SECRET = "mlpw-9Zx"
Cli = Callable[..., CliResult]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on return: nothing listens there


def _nowhere(root: Path, secret: str) -> None:
    """`secret` is in no file under `root` (results, predictions, Hydra's saved config, logs)."""
    holding = [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert holding == []


def _stored(url: str) -> list[tuple[str, str | None]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [(r[0], r[1]) for r in conn.execute(text("SELECT config_json, record_json FROM runs"))]
    finally:
        engine.dispose()


def _smoke(cli: Cli, tmp_path: Path, *overrides: str, env: dict[str, str] | None = None) -> CliResult:
    return cli(
        "eval", "experiment=smoke", "model=fake", "device=cpu", f"hydra.run.dir={tmp_path / 'out'}",
        *overrides, cwd=tmp_path, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("postgresql+psycopg://user:s3cret@host:5432/db", "postgresql+psycopg://user:***@host:5432/db"),
        ("http://muser:mlpw@127.0.0.1:5999", "http://muser:***@127.0.0.1:5999"),
        ("https://u:p%40ss:w@h/x", "https://u:***@h/x"),
        (
            "postgresql://u@h/db?sslmode=require&password=pw",
            "postgresql://u@h/db?sslmode=require&password=***",
        ),
        ("sqlite:///relative/store.db", "sqlite:///relative/store.db"),
        ("http://u@h:1", "http://u@h:1"),
    ],
)
def test_redact_masks_the_password_and_keeps_the_rest(raw: str, shown: str) -> None:
    assert redact(raw) == shown
    assert redact(shown) == shown  # twice changes nothing
    line = f"- tracking.db_url='{raw}' and again {raw}"
    assert redact_text(line) == f"- tracking.db_url='{shown}' and again {shown}"


def test_strip_userinfo_drops_user_and_password() -> None:
    assert strip_userinfo("http://muser:mlpw@127.0.0.1:5999/x") == "http://127.0.0.1:5999/x"


def test_a_db_password_reaches_no_output_file_or_stored_row(
    postgres_url: str, tmp_path: Path, cli: Cli
) -> None:
    url = make_url(postgres_url).set(password=DB_SECRET).render_as_string(hide_password=False)
    assert DB_SECRET in url  # the server trusts any password: this one is only carried along
    got = _smoke(cli, tmp_path, "tracking=sql_only", f"tracking.db_url={url}")
    assert got.code == 0, got.err
    assert DB_SECRET not in got.out + got.err
    _nowhere(tmp_path, DB_SECRET)
    assert "postgres:***@" in (tmp_path / "out" / ".hydra" / "overrides.yaml").read_text()  # masked, kept
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["config"]["tracking"]["db_url"] == redact(url)
    ((config_json, record_json),) = _stored(url)
    assert record_json is not None
    assert DB_SECRET not in config_json + record_json
    assert "postgres:***@" in config_json

    upgraded = cli("runs", "--db", url, "db-upgrade", cwd=tmp_path)
    assert upgraded.code == 0, upgraded.err
    assert "schema at" in upgraded.out
    assert DB_SECRET not in upgraded.out + upgraded.err


def test_a_db_error_line_has_no_password(tmp_path: Path, cli: Cli) -> None:
    bad = f"postgresql+psycopg://postgres:{DB_SECRET}@127.0.0.1:{_closed_port()}/nothing"
    for got in (
        _smoke(cli, tmp_path, "tracking=sql_only", f"tracking.db_url={bad}"),
        cli("runs", "--db", bad, "db-upgrade", cwd=tmp_path),
        cli("runs", "--db", bad, "list", cwd=tmp_path),
    ):
        assert got.code == 2, got.err
        assert DB_SECRET not in got.out + got.err
        assert "postgres:***@127.0.0.1" in got.err
    _nowhere(tmp_path, DB_SECRET)


def test_a_raw_at_or_slash_in_a_password_is_refused_before_any_part_of_it_is_printed(
    tmp_path: Path, cli: Cli
) -> None:
    """SQLAlchemy ends the userinfo at the first `@` and MLflow's client the host at a `/`: the rest
    of the password was printed as a host name (`failed to resolve host 'ss@vw@127.0.0.1'`). Such a
    URL is now refused in one line that says how to write it, naming no part of it (issue 52)."""
    db = f"postgresql+psycopg://postgres:p@ss@vw{DB_SECRET}@127.0.0.1:{_closed_port()}/x"
    for got in (
        _smoke(cli, tmp_path, "tracking=sql_only", f"tracking.db_url={db}"),
        cli("runs", "--db", db, "list", cwd=tmp_path),
    ):
        assert got.code == 2, got.err
        assert "password holds a raw @ / ? or #: write them percent-encoded (%40 %2F %3F %23" in got.err
        assert "vw" not in got.err
        assert DB_SECRET not in got.out + got.err
    uri = f"http://muser:ab/{ML_SECRET}@127.0.0.1:{_closed_port()}"
    got = _smoke(
        cli, tmp_path, f"tracking.db_url=sqlite:///{tmp_path / 's.db'}", f"tracking.mlflow_uri={uri}"
    )
    assert got.code == 2
    (line,) = got.errors
    assert line.endswith(
        "tracking.mlflow_uri's password holds / ? or #: write them percent-encoded (%2F %3F %23)"
    )
    _nowhere(tmp_path, DB_SECRET)
    _nowhere(tmp_path, ML_SECRET)


def _everything_logged(client: MlflowClient, run_id: str, into: Path) -> str:
    """Every param, tag and artifact of an MLflow run, as one text."""
    run = client.get_run(run_id)
    parts: list[Any] = [run.info.run_name, run.info.artifact_uri, run.data.params, run.data.tags]
    folder = Path(client.download_artifacts(run_id, "", str(into)))
    parts += [p.read_bytes().decode(errors="replace") for p in folder.rglob("*") if p.is_file()]
    return json.dumps(parts, default=str)


def test_a_credentialed_mlflow_url_logs_the_run_and_keeps_no_password(
    mlflow_server: str, tmp_path: Path, cli: Cli
) -> None:
    uri = mlflow_server.replace("http://", f"http://muser:{ML_SECRET}@")
    db = f"sqlite:///{tmp_path / 'store.db'}"
    got = _smoke(
        cli, tmp_path, f"tracking.db_url={db}", f"tracking.mlflow_uri={uri}", "tracking.experiment=cred"
    )
    assert got.code == 0, got.err
    assert "warning" not in got.err  # the reachability check and the client both took the URL
    assert ML_SECRET not in got.out + got.err
    (stored,) = SqlStore(db).runs()
    assert stored.mlflow_run_id is not None
    assert stored.mlflow_synced_at is not None
    assert ML_SECRET not in stored.config_json + (stored.record_json or "")
    assert "muser:***@" in stored.config_json
    client = MlflowClient(tracking_uri=mlflow_server)
    assert client.get_run(stored.mlflow_run_id).info.status == "FINISHED"
    assert ML_SECRET not in _everything_logged(client, stored.mlflow_run_id, tmp_path / "dl")
    _nowhere(tmp_path / "out", ML_SECRET)


def test_a_recorded_mlflow_password_comes_back_from_the_environment_or_sync_says_how(
    mlflow_server: str, tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = mlflow_server.replace("http://", f"http://muser:{ML_SECRET}@")
    db = f"sqlite:///{tmp_path / 'store.db'}"
    got = _smoke(cli, tmp_path, "tracking=sql_only", f"tracking.db_url={db}", f"tracking.mlflow_uri={uri}",
                 "tracking.experiment=later")  # fmt: skip
    assert got.code == 0, got.err
    refused = cli("runs", "--db", db, "sync", cwd=tmp_path)
    assert refused.code == 2
    assert len(refused.errors) == 1, refused.err
    assert "recorded without its password" in refused.errors[0]
    assert "--mlflow-uri" in refused.errors[0]
    assert ML_SECRET not in refused.out + refused.err
    synced = cli("runs", "--db", db, "sync", cwd=tmp_path, env={"MLFLOW_TRACKING_URI": uri})
    assert synced.code == 0, synced.err
    assert ML_SECRET not in synced.out + synced.err
    (stored,) = SqlStore(db).runs()
    assert stored.mlflow_synced_at is not None
    assert stored.mlflow_run_id is not None
    client = MlflowClient(tracking_uri=mlflow_server)
    assert client.get_run(stored.mlflow_run_id).info.status == "FINISHED"
    assert ML_SECRET not in _everything_logged(client, stored.mlflow_run_id, tmp_path / "dl")
    assert not (tmp_path / "mlflow.db").exists()


def test_a_credentialed_mlflow_url_that_is_down_warns_without_the_password(tmp_path: Path, cli: Cli) -> None:
    uri = f"http://muser:{ML_SECRET}@127.0.0.1:{_closed_port()}"
    db = f"sqlite:///{tmp_path / 'store.db'}"
    got = _smoke(cli, tmp_path, f"tracking.db_url={db}", f"tracking.mlflow_uri={uri}")
    assert got.code == 0, got.err
    assert ML_SECRET not in got.out + got.err
    assert "is unreachable" in got.err
    assert f"sync --mlflow-uri '{redact(uri)}' (with the password in place of ***)" in got.err
    _nowhere(tmp_path, ML_SECRET)


@pytest.mark.parametrize("setting", ["tracking.db_url", "tracking.mlflow_uri"])
def test_a_password_with_a_space_is_in_no_file_hydra_writes(setting: str, tmp_path: Path, cli: Cli) -> None:
    """YAML folds a long line at a space: Hydra's saved `override_dirname` held the password split
    over two lines, where no text search finds it whole (issue 52). The files are masked as parsed."""
    secret = "open s3same-Zq"
    port = _closed_port()
    url = (
        f"postgresql+psycopg://postgres:{secret}@127.0.0.1:{port}/nothing"
        if setting == "tracking.db_url"
        else f"http://muser:{secret}@127.0.0.1:{port}"
    )
    extra = [] if setting == "tracking.db_url" else [f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"]
    # A run refused at its store leaves no folder it made (test_cli_newcomer); one that was there stays,
    # Hydra's files in it: they are the ones to search.
    (tmp_path / "out").mkdir()
    got = _smoke(cli, tmp_path, *extra, f'{setting}="{url}"')
    assert got.code == (2 if setting == "tracking.db_url" else 0), got.err
    assert "s3same" not in got.out + got.err
    assert (tmp_path / "out" / ".hydra" / "hydra.yaml").is_file()  # kept, masked
    _nowhere(tmp_path, "s3same")


def test_a_sweep_keeps_no_password_in_its_files_or_its_launcher_log(tmp_path: Path, cli: Cli) -> None:
    uri = f"http://muser:{ML_SECRET}@127.0.0.1:{_closed_port()}"
    db, multi = f"tracking.db_url=sqlite:///{tmp_path / 's.db'}", tmp_path / "multi"
    got = cli(
        "eval", "-m", "experiment=smoke", "model=fake", "device=cpu", "k=0,1", db,
        f"tracking.mlflow_uri={uri}", f"hydra.sweep.dir={multi}", cwd=tmp_path,
    )  # fmt: skip
    assert got.code == 0, got.err
    assert "muser\\:***@" in got.out  # the launcher's line per job, the URL escaped (`http\\://u\\:pw@`)
    assert ML_SECRET not in got.out + got.err
    _nowhere(tmp_path, ML_SECRET)
    assert "muser:***@" in (multi / "multirun.yaml").read_text()
    assert "muser\\:***@" in (multi / "1" / ".hydra" / "overrides.yaml").read_text()


def test_the_sync_hint_names_mlflow_tracking_uri_and_sync_goes_there_later(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    dead = f"http://127.0.0.1:{_closed_port()}"
    db = f"sqlite:///{tmp_path / 'store.db'}"
    got = _smoke(cli, tmp_path, f"tracking.db_url={db}", env={"MLFLOW_TRACKING_URI": dead})
    assert got.code == 0, got.err
    assert f"sync --mlflow-uri '{dead}'" in got.err  # the server it was meant for, named
    later = cli("runs", "--db", db, "sync", cwd=tmp_path)  # a shell without MLFLOW_TRACKING_URI
    assert later.code == 2
    assert len(later.errors) == 1, later.err
    assert dead in later.errors[0]
    assert "0 of 1 unsynced runs logged" in later.out
    assert not (tmp_path / "mlflow.db").exists()  # not logged into a new local store instead
    (stored,) = SqlStore(db).runs()
    assert stored.mlflow_synced_at is None


def test_sync_that_cannot_log_exits_2_in_one_line(sqlite_url: str, tmp_path: Path, cli: Cli) -> None:
    store = SqlStore(sqlite_url)
    synthetic_run(store, "m", {"anatomy": [True, False]})
    store.close()
    dead = f"http://127.0.0.1:{_closed_port()}"
    got = cli("runs", "--db", sqlite_url, "sync", "--mlflow-uri", dead, cwd=tmp_path)
    assert got.code == 2  # 1 is the gate's verdict alone
    assert got.errors == [line for line in got.err.splitlines() if line.strip()], got.err
    assert len(got.errors) == 1
    assert "1 of 1 unsynced runs could not be logged to MLflow" in got.errors[0]


def test_a_sweep_job_that_cannot_run_ends_the_sweep_with_one_line_and_no_password(
    tmp_path: Path, cli: Cli
) -> None:
    """A job's unusable input leaves it as an exception Hydra's driver prints (under Ray a process
    exit was retried as a crash, tests/commands/test_launchers_clusters.py); the driver also prints the job's
    overrides, a Python list whose backslashes are doubled (`bob\\\\:pw@`): masked too."""
    url = f"postgresql+psycopg://bob:{DB_SECRET}@127.0.0.1:{_closed_port()}/x"
    got = cli("eval", "-m", "experiment=smoke", "model=fake", "device=cpu", "k=0,1", f"tracking.db_url={url}",
              f"hydra.sweep.dir={tmp_path / 'multi'}", cwd=tmp_path)  # fmt: skip
    assert got.code == 2, got.err
    said = [line for line in got.err.splitlines() if line.startswith("mmlu_track: error: sweep job 0: ")]
    assert len(said) == 1, got.err
    assert "cannot be opened" in said[0]
    assert "Error executing job with overrides" in got.err  # Hydra's own line, with the URL in it
    assert DB_SECRET not in got.out + got.err
    assert (
        redact_text("['x=postgresql\\\\://bob\\\\:pw@h\\\\:1/x']")
        == "['x=postgresql\\\\://bob\\\\:***@h\\\\:1/x']"
    )


def test_a_served_models_password_with_a_space_is_in_no_file_and_not_on_the_console(
    tmp_path: Path, cli: Cli
) -> None:
    """The third URL setting (issue 52): a server that refuses the key (401) ends the run before any
    work; the folder that was there keeps Hydra's files, masked."""
    from .serve import FaultProxy

    proxy = FaultProxy(_closed_port(), status=401, fail_first=1000, retry_after=None)
    try:
        (tmp_path / "out").mkdir()
        url = f"http://muser:open s3same-Zq@127.0.0.1:{proxy.port}/v1"
        served = ["model=openai_api", f'model.base_url="{url}"', "model.served_name=m", "model.revision=r"]
        got = _smoke(cli, tmp_path, f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}", *served)
    finally:
        proxy.close()
    assert got.code == 2, got.err
    assert len(got.errors) == 1
    assert "s3same" not in got.out + got.err
    assert (tmp_path / "out" / ".hydra" / "hydra.yaml").is_file()
    _nowhere(tmp_path, "s3same")
    assert not (tmp_path / "store.db").exists()  # refused before any work: no store made for it


RFC3986 = "Zq!$&'()*+,;=~-._:s3 same"  # every character RFC 3986 allows raw in a password, and a space


@pytest.mark.parametrize("setting", ["tracking.db_url", "tracking.mlflow_uri", "model.base_url"])
def test_a_password_with_every_rfc3986_character_and_a_space_leaves_no_trace(
    setting: str, tmp_path: Path, cli: Cli
) -> None:
    """Issue 52's sweep, end to end: in each URL setting, no file the run or Hydra writes (the SQL
    store's file and its WAL among them), and not the console, holds any part of the password."""
    from .serve import FaultProxy

    proxy = FaultProxy(_closed_port(), status=401, fail_first=1000, retry_after=None)  # refuses any key
    urls = {
        "tracking.db_url": f"postgresql+psycopg://postgres:{RFC3986}@127.0.0.1:{_closed_port()}/nothing",
        "tracking.mlflow_uri": f"http://muser:{RFC3986}@127.0.0.1:{_closed_port()}",
        "model.base_url": f"http://muser:{RFC3986}@127.0.0.1:{proxy.port}/v1",
    }
    extra = [] if setting == "tracking.db_url" else [f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"]
    if setting == "model.base_url":
        extra += ["model=openai_api", "model.served_name=m", "model.revision=r"]
    (tmp_path / "out").mkdir()  # there before: Hydra's files in it stay, to be searched
    try:
        got = _smoke(cli, tmp_path, *extra, f'{setting}="{urls[setting]}"')
    finally:
        proxy.close()
    assert got.code == (0 if setting == "tracking.mlflow_uri" else 2), got.err
    for part in ("s3 same", "!$&'()*+"):
        assert part not in got.out + got.err
        _nowhere(tmp_path, part)
    assert (tmp_path / "out" / ".hydra" / "hydra.yaml").is_file()
    if setting == "tracking.mlflow_uri":  # the run finished: its store holds it, and no password
        assert (tmp_path / "store.db").is_file()
