"""MLflow logging against a real `mlflow server` on 127.0.0.1 (SQLite backend), read back by its client
(the session's `mlflow_server` fixture, tests/conftest.py: each test logs into its own experiment)."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mmlu_track.commands.runs import main as runs_main
from mmlu_track.pipeline.evaluate import QUIET, Display, Origin, run
from mmlu_track.store.mlflow import views as mlflow_views
from mmlu_track.store.mlflow.live import GATE_TAG, RUN_ID_TAG, SWEEP_TAG, metric_key
from mmlu_track.store.sql import SqlStore

from ... import processes
from ...conftest import CliResult, synthetic_start, tiny_run_cfg
from ...serve import free_port


def test_run_is_logged_with_params_metrics_tags_and_artifacts(
    mlflow_server: str, sqlite_url: str, tmp_path: Path
) -> None:
    cfg = tiny_run_cfg(
        sqlite_url,
        "tracking.mlflow=true",
        f"tracking.mlflow_uri={mlflow_server}",
        "tracking.experiment=t1",
        model="tiny",
    )
    said: list[str] = []
    out = run(
        cfg, tmp_path / "out", display=Display(said.append, progress=False), origin=Origin(sweep="/sweeps/s1")
    )
    assert out.mlflow_run_id is not None
    stored = SqlStore(sqlite_url).get(out.run_id)
    assert stored is not None
    assert stored.mlflow_run_id == out.mlflow_run_id

    client = MlflowClient(tracking_uri=mlflow_server)
    got = client.get_run(out.mlflow_run_id)
    m, p, t = got.data.metrics, got.data.params, got.data.tags
    # MLflow shows a metric to 4 significant digits (`store.mlflow.pages.shown`)
    assert m["acc_micro"] == pytest.approx(out.scores.micro.acc, rel=1e-3)
    assert m["acc_macro"] == pytest.approx(out.scores.macro.acc, rel=1e-3)
    assert m["acc/anatomy"] == pytest.approx(out.scores.subjects["anatomy"].acc, rel=1e-3)
    assert "stderr/anatomy" in m
    assert "stderr_micro" in m
    assert m[metric_key("acc", "category", "other (business, health, misc.)")] == pytest.approx(
        out.scores.categories["other (business, health, misc.)"].acc, rel=1e-3
    )
    assert "acc/category/other" in m
    assert "acc/category/STEM" in m
    assert "acc/subcategory/computer_science" not in m  # only subcategories that were evaluated
    assert p["model.name"] == "tiny-random-llama"
    assert p["scoring"] == "logprob"
    assert p["formulation"] == "original"
    assert p["k"] == "2"
    assert p["data.fingerprint"] == out.record.start.data.fingerprint
    assert p["prompt.template_hash"] == out.record.start.template_hash
    assert p["version.transformers"] == out.record.start.versions["transformers"]
    assert "model.revision" not in p  # unset: left out, never the string "None"
    # The model's identity (a random model's seed), then what differs from the defaults (issue 42).
    assert got.info.run_name == "tiny-random-llama@seed0-k2-logprob-2subjects-float32-limit3"
    assert t[RUN_ID_TAG] == out.run_id
    assert t[SWEEP_TAG] == "/sweeps/s1"
    assert "git_commit" in t
    assert t["device"] == "cpu"
    # The run page's description opens with the headline; the questions are its dataset input.
    low, _ = out.scores.micro.interval()
    note = t["mlflow.note.content"]
    assert note.startswith(f"Micro accuracy {100 * out.scores.micro.acc:.2f} % [{100 * low:.1f}, ")
    assert "tiny-random-llama (float32, cpu) · original, k=2, logprob scoring · limit=3" in note
    (used,) = got.inputs.dataset_inputs
    assert (used.dataset.name, used.dataset.digest) == ("mmlu-limit3", out.record.start.data.fingerprint[:12])
    assert json.loads(used.dataset.profile)["questions"] == 6
    assert {x.key: x.value for x in used.tags}["mlflow.data.context"] == "evaluation"
    artifacts = {a.path for a in client.list_artifacts(out.mlflow_run_id)}
    assert artifacts >= {
        "results.json",
        "predictions.jsonl.gz",  # gzipped: the same rows are in the store and the run folder
        "config.json",
        "example_prompt.txt",
        "subject_accuracy.png",
    }
    logged = Path(client.download_artifacts(out.mlflow_run_id, "predictions.jsonl.gz", str(tmp_path)))
    local = out.output_dir / "predictions.jsonl"
    assert gzip.decompress(logged.read_bytes()) == local.read_bytes()  # the run folder's own rows
    first = json.loads(local.read_text().splitlines()[0])  # with the text, as --log_samples
    assert first["question"]
    assert len(first["choices"]) == 4
    assert first["prompt_hash"]
    png = Path(client.download_artifacts(out.mlflow_run_id, "subject_accuracy.png", str(tmp_path)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The experiment holds the `mmlu_track` runs-table view; every column it shows is one a run has.
    view = json.loads(client.get_experiment(got.info.experiment_id).tags[mlflow_views.VIEW_TAG])
    assert f"compare runs: {mlflow_views.url(mlflow_server, got.info.experiment_id)}" in said  # printed
    state = json.loads(view["state"])
    assert (view["name"], view["mmlu_track_view"]) == ("mmlu_track", mlflow_views.VERSION)
    # not cut: MLflow 3.17 drew 66 characters of a name in 470 px (headless Chromium)
    assert state["columnWidths"][mlflow_views.RUN_NAME] >= 7 * len(got.info.run_name)
    for column in state["selectedColumns"]:
        kind, name = re.fullmatch(r"(\w+)\.`(.+)`", column).groups()  # type: ignore[union-attr]
        have = {"metrics": m, "params": p, "attributes": {"Description", "Dataset"}, "tags": {GATE_TAG}}
        assert name in have[kind], column
    assert re.search(state["chartsSearchFilter"], "acc_micro")
    assert not re.search(state["chartsSearchFilter"], "acc/anatomy")


def test_mlflow_down_keeps_the_run_and_sync_logs_it_later(
    mlflow_server: str, sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = tiny_run_cfg(
        sqlite_url,
        "tracking.mlflow=true",
        f"tracking.mlflow_uri={dead}",
        "tracking.experiment=t2",
        model="tiny",
    )
    out = run(cfg, tmp_path / "out", display=QUIET)
    assert out.mlflow_run_id is None
    assert "is unreachable" in capsys.readouterr().err
    store = SqlStore(sqlite_url)
    stored = store.get(out.run_id)
    assert stored is not None
    assert stored.status == "finished"
    assert stored.mlflow_run_id is None
    assert len(store.question_results(out.run_id)) == 6

    assert runs_main(["--db", sqlite_url, "sync", "--mlflow-uri", mlflow_server, "--experiment", "t2"]) == 0
    synced = store.get(out.run_id)
    assert synced is not None
    assert synced.mlflow_run_id is not None
    got = MlflowClient(tracking_uri=mlflow_server).get_run(synced.mlflow_run_id)
    assert got.data.metrics["acc_micro"] == pytest.approx(out.scores.micro.acc)
    # its predictions with each question's text, as a live run's (planned again, same fingerprint)
    logged = MlflowClient(tracking_uri=mlflow_server).download_artifacts(
        synced.mlflow_run_id, "predictions.jsonl.gz", str(tmp_path)
    )
    assert gzip.decompress(Path(logged).read_bytes()) == (out.output_dir / "predictions.jsonl").read_bytes()
    assert runs_main(["--db", sqlite_url, "sync", "--mlflow-uri", mlflow_server]) == 0
    assert "0 of 0 unsynced runs" in capsys.readouterr().out


def test_runs_cli_lists_and_shows(sqlite_url: str, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    out = run(tiny_run_cfg(sqlite_url, model="tiny"), tmp_path / "out", display=QUIET)
    proc = cli("runs", "--db", sqlite_url, "list", cwd=tmp_path)
    assert proc.code == 0, proc.err
    assert out.run_id[:12] in proc.out
    assert "tiny-random-llama" in proc.out
    header, row = proc.out.splitlines()[:2]
    assert header.split()[4:6] == ["version", "scoring"]
    assert row.split()[4:6] == ["seed=0", "logprob"]  # the tiny model's weights are its seed's
    assert header.split()[8:10] == ["dtype", "limit"]
    assert row.split()[8:10] == ["float32", "3"]
    shown = cli("runs", "--db", sqlite_url, "show", out.run_id[:12], cwd=tmp_path)
    assert shown.code == 0, shown.err
    assert "micro average" in shown.out
    assert re.search(r"created \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC  finished \d{4}-.* UTC", shown.out)
    assert out.record.start.data.fingerprint in shown.out
    missing = cli("runs", "--db", sqlite_url, "show", "nope", cwd=tmp_path)
    assert missing.code == 2
    assert "no run 'nope'" in missing.err


def test_sync_sends_a_run_where_it_was_meant_to_go(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = tiny_run_cfg(sqlite_url, "tracking.mlflow=true", f"tracking.mlflow_uri={dead}", model="tiny")
    out = run(cfg, tmp_path / "out", display=QUIET)
    assert f"sync --mlflow-uri '{dead}'" in capsys.readouterr().err  # the hint names the intended server
    monkeypatch.chdir(tmp_path)
    assert runs_main(["--db", sqlite_url, "sync"]) == 2  # its server is still down: not logged elsewhere
    assert not (tmp_path / "mlflow.db").exists()
    stored = SqlStore(sqlite_url).get(out.run_id)
    assert stored is not None
    assert stored.mlflow_run_id is None


@pytest.mark.slow  # three interpreters
def test_processes_starting_together_share_one_fresh_mlflow_store(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = (
        "from mmlu_track.store.mlflow.client import client_and_experiment\n"
        f"print(client_and_experiment({uri!r}, 'mmlu_track')[1])\n"
    )
    procs = [processes.Popen(["-c", code]) for _ in range(3)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-500:] for _, err in outs]
    assert len({out.strip() for out, _ in outs}) == 1


def test_every_setting_and_every_loaded_fact_is_a_param() -> None:
    """A field added to the settings, to ModelInfo or to DataInfo is logged with no edit in
    store/mlflow.py: the params are every one of them by dotted name (unset ones left out)."""
    import dataclasses

    from mmlu_track.settings.config import applies, to_dict
    from mmlu_track.store.mlflow.live import params

    start = synthetic_start()
    got = params(start)
    values: dict[str, object] = {}
    for k, v in to_dict(start.config).items():
        if k not in ("tracking", "gate", "subjects", "shard"):  # shard: which process opened it
            values |= {f"{k}.{kk}": vv for kk, vv in v.items()} if isinstance(v, dict) else {k: v}
    for part, info in (("model", start.model), ("data", start.data)):
        values |= {f"{part}.{f.name}": getattr(info, f.name) for f in dataclasses.fields(info)}
    values.pop("scoring.method")  # logged as `scoring`, as before
    values.pop("model.dtype")  # `dtype`: what it ran in, once
    values["device"] = values.pop("model.device")  # `device`: where it ran, once
    assert {k for k, v in values.items() if v is not None and applies(k, start.config)} <= set(got)
    assert not {k for k, v in values.items() if v is None} & set(got)  # never the string "None"
    # What does not apply to a random model scored by log-probs is left out (issue 42).
    assert not {"model.max_retries", "model.gguf_file", "scoring.patterns", "scoring.max_new_tokens"} & set(
        got
    )
    assert "model.tiny_seed" in got
    assert "scoring.calibration" in got
    assert got["scoring"] == "logprob"
    assert got["dtype"] == start.model.dtype
    assert got["device"] == "cpu"  # the device it ran on, not the setting's `auto`
    assert got["model.revision"] == "r1"  # what was loaded, over what was asked for (None)


def test_the_view_is_ours_to_update_and_a_users_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`mlflow_views.needs_writing`: absent or an older layout of ours -> (re)written; a view a user
    saved over it in the UI (no `mmlu_track_view` field) or an unreadable one -> kept."""
    ours = mlflow_views.envelope("evaluations", now_ms=1)
    older = json.dumps({**json.loads(ours), "mmlu_track_view": mlflow_views.VERSION - 1})
    users = json.dumps({"name": "mine", "createdAt": 1, "updatedAt": 2, "state": "{}"})
    assert mlflow_views.needs_writing(None)
    assert mlflow_views.needs_writing(older)
    assert not mlflow_views.needs_writing(ours)
    assert not mlflow_views.needs_writing(users)
    assert not mlflow_views.needs_writing("not json")
    # A link to paste: never the tracking URI's password; a local store's on `mlflow ui`'s port.
    link = mlflow_views.url("https://bob:s3cret@mlflow.example.com/", "7")
    assert link == (
        "https://mlflow.example.com/#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=mmlu_track"
    )
    for local in ("sqlite:///mlflow.db", "mlruns", "postgresql+psycopg://u:p@db/mlflow"):
        assert str(mlflow_views.url(local, "1")).startswith("http://127.0.0.1:5000/#/experiments/1/runs?")
    assert mlflow_views.url("databricks", "1") is None  # its workspace has its own UI: no made-up link
    # No tracking.mlflow_uri: MLflow's own MLFLOW_TRACKING_URI is where the run went, so the link too
    from mmlu_track.store.mlflow.live import LiveRun

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://bob:s3cret@mlflow.example.com:5000")
    live = LiveRun(None, "e", print)
    live.experiment_id = "3"
    assert str(live.view_url()).startswith("http://mlflow.example.com:5000/#/experiments/3/runs?")


def test_the_latest_gate_sits_under_the_headline_where_mlflow_does_not_fold_it() -> None:
    from mmlu_track.store.mlflow.pages import GATE_LINE, gate_line

    note = "MMLU micro accuracy 50.00 %\n\nmodel · prompt\n\n| category | accuracy |\n|---|---|"
    once = gate_line(note, "PASS vs baseline a", "#/experiments/2/runs/r1")
    twice = gate_line(once, "REGRESSION vs baseline b", "#/experiments/2/runs/r2")
    assert twice.split("\n\n") == [
        "MMLU micro accuracy 50.00 %",
        f"{GATE_LINE} [REGRESSION vs baseline b](#/experiments/2/runs/r2)",
        "model · prompt",
        "| category | accuracy |\n|---|---|",
    ]
    assert gate_line("", "PASS vs baseline a", "#/l") == f"{GATE_LINE} [PASS vs baseline a](#/l)"


def test_a_run_mlflow_no_longer_has_is_reopened_as_a_new_one_and_only_then(tmp_path: Path) -> None:
    """Resuming: the recorded MLflow run deleted, or not on this server, gets a new run (MLflow's
    answers, `RUN_GONE`, as this MLflow gives them). Any other failure (a store locked for 20 s, tried
    by hand) breaks logging with one warning and never replaces the recorded run."""
    from mmlu_track.store.mlflow.live import LiveRun

    uri, start, warned = f"sqlite:///{tmp_path / 'm.db'}", synthetic_start(), list[str]()
    first = LiveRun(uri, "e", warned.append).open("r1", start)
    assert first is not None
    client = MlflowClient(tracking_uri=uri)
    client.delete_run(first)
    for gone in (first, "0" * 32):  # deleted; never on this server
        again = LiveRun(uri, "e", warned.append).open("r1", start, existing=gone)
        assert again not in (None, first, "0" * 32)
    assert warned == []


def test_the_run_name_column_widens_to_show_every_name_whole(tmp_path: Path) -> None:
    """Names were cut at 520 px (issue 86; measured in MLflow 3.17.2 at 1,600 px, side panel open or
    closed: a 103-character name needs 626 px, the noise command's 574): the default holds the names
    measured, and a longer name logged widens the view (never narrows it); a user's view stays."""
    from mmlu_track.store.mlflow.client import client_and_experiment

    measured = {103: 626, 96: 574, 94: 573, 92: 558}  # characters -> px MLflow needed
    assert all(mlflow_views.name_width("x" * n) >= px for n, px in measured.items())
    ours = mlflow_views.envelope("evaluations", now_ms=1)
    assert mlflow_views.name_column(ours) >= 626
    assert mlflow_views.needs_writing(ours, mlflow_views.name_width("x" * 200))
    assert not mlflow_views.needs_writing(ours, mlflow_views.name_width("x" * 90))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    long_name = "m" * 160

    def width() -> int:
        client, exp_id = client_and_experiment(uri, "e", "evaluations", "short")
        return mlflow_views.name_column(client.get_experiment(exp_id).tags[mlflow_views.VIEW_TAG])

    assert width() == mlflow_views.name_column(ours)
    client_and_experiment(uri, "e", "evaluations", long_name)
    assert width() == mlflow_views.name_width(long_name)  # and a short name after it keeps it wide
