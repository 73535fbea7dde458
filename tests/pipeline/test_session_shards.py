"""Sharding: units cut from the plan, balanced over shards, scored by several processes into one run,
finalized once, equal to the unsharded run question by question."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from mmlu_track.eval.plan import UNIT_QUESTIONS, Unit, assign
from mmlu_track.pipeline.evaluate import QUIET, Display, RunOutput, run
from mmlu_track.store.sql import SqlStore

from .. import processes
from ..conftest import tiny_run_cfg

# At limit=200 professional_law (1,534 questions) and virology (166) are cut into slices, anatomy (135) not.
ARGS = ["k=0", "subjects=[professional_law,anatomy,virology]", "limit=200"]


def _units(costs: list[int]) -> list[Unit]:
    return [Unit(f"s{i}", 0, 1, c) for i, c in enumerate(costs)]


def test_assignment_is_deterministic_complete_and_balanced() -> None:
    rng = np.random.default_rng(0)
    units = _units([int(c) for c in rng.integers(1, 1000, size=80)])
    for shards in (1, 2, 3, 8, 100):
        parts = assign(units, shards)
        assert parts == assign(units, shards)
        assert sorted(u.subject for p in parts for u in p) == sorted(u.subject for u in units)  # each once
        for part in parts:  # plan order kept inside a shard
            assert part == sorted(part, key=units.index)
        loads = [sum(u.cost for u in p) for p in parts]
        # LPT's bound: the makespan is within 4/3 of the optimum, itself >= the mean load and the largest unit
        lower = max(sum(u.cost for u in units) / shards, *(u.cost for u in units))
        assert max(loads) <= 4 / 3 * lower + 1


def _exact(r: Any) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(r).items() if k not in ("logprobs", "margin")}


def _same_as(reference: RunOutput, got: list[Any]) -> None:
    want = sorted(reference.results, key=lambda r: (r.subject, r.index))
    got = sorted(got, key=lambda r: (r.subject, r.index))
    assert [_exact(r) for r in got] == [_exact(r) for r in want]
    np.testing.assert_allclose([r.logprobs for r in got], [r.logprobs for r in want], atol=1e-5)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> RunOutput:
    where = tmp_path_factory.mktemp("ref")
    return run(tiny_run_cfg(f"sqlite:///{where / 'ref.db'}", *ARGS), where, display=QUIET)


@pytest.mark.usefixtures("mlflow_store")
def test_four_shards_in_turn_make_one_run_equal_to_the_unsharded_one(
    tmp_path: Path, reference: RunOutput
) -> None:
    db, mlflow_uri = f"sqlite:///{tmp_path / 'store.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}"
    said: list[str] = []
    client = MlflowClient(tracking_uri=mlflow_uri)
    outs: list[RunOutput] = []
    for i in (2, 0, 3, 1):
        tracking = [
            "tracking.mlflow=true",
            f"tracking.mlflow_uri={mlflow_uri}",
            "tracking.experiment=sharded",
        ]
        cfg = tiny_run_cfg(db, *ARGS, "shards=4", f"shard={i}", *tracking)
        outs.append(run(cfg, tmp_path / f"shard{i}", display=Display(said.append, progress=False)))
        # One MLflow run from the first shard on, live until the shard that finalizes ends it.
        (live,) = client.search_runs([client.get_experiment_by_name("sharded").experiment_id])
        assert live.info.status == ("FINISHED" if len(outs) == 4 else "RUNNING")
        if len(outs) == 1:
            assert live.data.metrics  # the first shard's complete subjects are there already
    assert live.data.params["shards"] == "4"
    assert "shard" not in live.data.params  # which shard opened it is no setting of the run
    assert " · 4 shards · " in live.data.tags["mlflow.note.content"]
    subjects = [k for k in live.data.metrics if k.startswith("acc/") and k.count("/") == 1]
    assert sorted(subjects) == ["acc/anatomy", "acc/professional_law", "acc/virology"]
    for key in subjects:  # each logged once, by whichever shard completed it (sliced ones included)
        assert len(client.get_metric_history(live.info.run_id, key)) == 1
    progress = client.get_metric_history(live.info.run_id, "progress/acc_micro")  # the run's, not a shard's
    assert max(progress, key=lambda m: m.step).step == 3
    assert max(progress, key=lambda m: m.step).value == pytest.approx(reference.scores.micro.acc, rel=1e-3)  # type: ignore[union-attr]
    assert [o.record is None for o in outs] == [True, True, True, False]  # the last to commit finalizes
    assert len({o.run_id for o in outs}) == 1
    assert sum(len(o.results) for o in outs[:3]) < 501  # each shard returns its own questions
    final = outs[3]
    assert final.record is not None
    _same_as(reference, final.results)
    assert final.scores.micro == reference.scores.micro
    assert reference.record is not None
    # all shards' work: each runs the prefix of a subject sliced across shards once itself (a
    # process keeps a prefix for its next slice), so a little more than one process alone
    extra = final.record.timing.tokens_forwarded - reference.record.timing.tokens_forwarded
    assert 0 <= extra < 0.01 * reference.record.timing.tokens_forwarded
    assert final.scores.subjects == reference.scores.subjects
    assert len([s for s in said if "the shard that commits the run's last unit finalizes it" in s]) == 3
    store = SqlStore(db)
    (stored,) = store.runs()
    assert stored.status == "finished"
    assert stored.acc_micro == reference.scores.micro.acc
    exp = MlflowClient(tracking_uri=mlflow_uri).get_experiment_by_name("sharded")
    (logged,) = MlflowClient(tracking_uri=mlflow_uri).search_runs([exp.experiment_id])  # one MLflow run
    assert logged.info.status == "FINISHED"
    assert logged.data.metrics["acc_micro"] == pytest.approx(reference.scores.micro.acc, rel=1e-3)
    assert logged.info.start_time <= int(stored.created_at.timestamp() * 1000) + 1000


def test_a_big_subject_is_cut_into_slices() -> None:
    from mmlu_track.eval.plan import units

    cfg = tiny_run_cfg("sqlite:///never-opened.db", *ARGS)
    rendered = {"professional_law": [None] * 250, "anatomy": [None] * 135}  # only lengths matter here

    class P:  # a rendered prompt's two lengths
        prefix = "p" * 10
        text = "p" * 30

    cut = units(cfg, {s: [P()] * len(v) for s, v in rendered.items()})
    assert [(u.subject, u.start, u.stop) for u in cut] == [
        ("professional_law", 0, 125),
        ("professional_law", 125, 250),
        ("anatomy", 0, 135),
    ]
    assert cut[0].cost == 10 + 125 * 20
    assert round(1534 / UNIT_QUESTIONS) == 15
    whole = units(
        dataclasses.replace(cfg, scoring=dataclasses.replace(cfg.scoring, calibration="mean")),
        {s: [P()] * len(v) for s, v in rendered.items()},
    )
    assert [(u.subject, u.start, u.stop) for u in whole] == [
        ("professional_law", 0, 250),
        ("anatomy", 0, 135),
    ]


def _shard_cmd(db: str, out: Path, shards: int, shard: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mmlu_track",
        "experiment=smoke",
        "model=fake",
        "device=cpu",
        "tracking=sql_only",
        f"tracking.db_url={db}",
        *ARGS,
        f"shards={shards}",
        f"shard={shard}",
        f"hydra.run.dir={out}",
    ]


@pytest.mark.slow  # three interpreters
def test_a_shard_killed_midway_and_rerun_completes_the_run(tmp_path: Path, reference: RunOutput) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    env = {**os.environ, "HYDRA_FULL_ERROR": ""}
    slow = ["batch_size=2", "model.fake_seconds_per_question=0.02"]
    first = processes.Popen([*_shard_cmd(db, tmp_path / "a", 2, 0)[1:], *slow], cwd=tmp_path, env=env)
    store = SqlStore(db)
    deadline = time.time() + 240
    while not (runs := store.runs()) or not store.question_results(runs[0].id):
        assert first.poll() is None, first.communicate()
        assert time.time() < deadline, "shard 0 committed nothing in time"
        time.sleep(0.05)
    first.kill()  # SIGKILL: no chance to mark anything
    first.communicate(timeout=60)
    other = processes.run(_shard_cmd(db, tmp_path / "b", 2, 1)[1:], cwd=tmp_path, env=env)
    assert other.returncode == 0, other.stderr
    assert "finalizes it" in other.stdout  # shard 0's units are still open: not finalized
    (open_run,) = store.runs()
    assert open_run.status == "running"
    rerun = processes.run(_shard_cmd(db, tmp_path / "c", 2, 0)[1:], cwd=tmp_path, env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert f"resuming run {open_run.id} (shard 0 of 2)" in rerun.stdout
    assert "micro average" in rerun.stdout  # the rerun committed the last unit: it finalized
    (done,) = store.runs()
    assert done.status == "finished"
    _same_as(reference, store.question_results(done.id))


def _one_finished_run(db: str, mlflow_uri: str, folders: Path, reference: RunOutput) -> None:
    """No unit lost or written twice, finalized once (one results.json under `folders`), one MLflow
    run, equal to the unsharded run."""
    sql = SqlStore(db)
    (stored,) = sql.runs()
    assert stored.status == "finished"
    assert stored.acc_micro == reference.scores.micro.acc
    results = sql.question_results(stored.id)
    assert len(results) == len({(r.subject, r.index) for r in results}) == 200 + 135 + 166
    _same_as(reference, results)
    sql.close()
    client = MlflowClient(tracking_uri=mlflow_uri)
    (logged,) = client.search_runs([client.get_experiment_by_name("launched").experiment_id])
    assert logged.info.status == "FINISHED"
    assert logged.data.metrics["acc_micro"] == pytest.approx(reference.scores.micro.acc, rel=1e-3)
    assert len(list(folders.glob("*/results.json"))) == 1


def test_eight_shards_at_once_on_postgresql_make_one_run(
    tmp_path: Path, reference: RunOutput, postgres_url: str
) -> None:
    """Eight processes claiming one run's five units on PostgreSQL at once (three find none left):
    the concurrency a cluster launches, in processes of their own (the real schedulers' tests,
    tests/commands/test_launchers_clusters.py, run fewer: what they add is the scheduler)."""
    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # At the fake model's pace of a small model (10 ms a question): the shards are at work together.
    tracking = ["tracking.mlflow=true", f"tracking.mlflow_uri={mlflow_uri}", "tracking.experiment=launched",
                "model.fake_seconds_per_question=0.01"]  # fmt: skip
    env = {**os.environ, "HYDRA_FULL_ERROR": ""}
    procs = [
        processes.Popen(
            [*_shard_cmd(postgres_url, tmp_path / "jobs" / str(i), 8, i)[1:], *tracking],
            cwd=tmp_path,
            env=env,
        )
        for i in range(8)
    ]
    outs = [(p.communicate(timeout=300), p.wait()) for p in procs]
    assert [code for _, code in outs] == [0] * 8, outs
    assert sum("has no unit to score" in out for (out, _), _ in outs) == 3
    _one_finished_run(postgres_url, mlflow_uri, tmp_path / "jobs", reference)


def test_device_map_auto_places_a_hub_model_and_scores_the_same(tmp_path: Path, sqlite_url: str) -> None:
    """`model.device_map=auto` (accelerate's placement; here everything lands on the CPU) gives the
    same answers as the model moved whole to the device."""
    from mmlu_track.eval import models

    from ..conftest import compose_eval

    lm = models.load_model(compose_eval(["model=tiny", "device=cpu"]))
    saved = tmp_path / "saved"
    lm.model.save_pretrained(saved)
    lm.tokenizer.save_pretrained(saved)
    args = [f"model.name_or_path={saved}", "k=0", "limit=5"]
    plain = run(tiny_run_cfg(sqlite_url, *args, model="hf_hub"), tmp_path / "a", display=QUIET)
    mapped = run(
        tiny_run_cfg(sqlite_url, *args, "model.device_map=auto", model="hf_hub"),
        tmp_path / "b",
        display=QUIET,
    )
    assert mapped.record is not None
    assert mapped.record.start.model.device == "cpu"
    assert mapped.run_id != plain.run_id  # a setting of its own, recorded
    _same_as(plain, mapped.results)
