"""store/recorder.py: an evaluation's one voice to persistence. A SQLite file still to be made is
made only at first use (a command refused before then leaves none); a run is claimed, its units
committed, its shard ended, finalized by exactly one process and finished; a failure leaves it
resumable with what it committed."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmlu_track.records.results import QuestionResult, aggregate
from mmlu_track.records.stored import RunStatus, ShardWork
from mmlu_track.settings.config import TrackingConfig
from mmlu_track.store.db import StoreError
from mmlu_track.store.recorder import RunRecorder, StoreOnDemand
from mmlu_track.store.sql import SqlStore

from ..conftest import compose_eval, synthetic_record, synthetic_start


def _unit(subject: str, n: int) -> list[QuestionResult]:
    return [QuestionResult(subject, i, "h", 0, 1, False, None, "A", 0, i % 2, None) for i in range(n)]


def test_a_new_sqlite_store_is_made_at_first_use_only(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    store = StoreOnDemand(TrackingConfig(db_url=f"sqlite:///{db}", mlflow=False))
    assert not db.exists()
    assert store.get() is store.get()  # made once, the same after
    assert db.exists()
    store.close()
    with pytest.raises(StoreError):  # its folder must exist: refused now, not after the model loaded
        StoreOnDemand(TrackingConfig(db_url=f"sqlite:///{tmp_path / 'nope' / 'x.db'}"))
    nowhere = f"sqlite:///{tmp_path / 'no' / 'm.db'}"
    with pytest.raises(StoreError, match=r"the MLflow store's folder .* does not exist"):
        RunRecorder(TrackingConfig(db_url=f"sqlite:///{db}"), mlflow_uri=nowhere)


def test_a_run_is_claimed_committed_finalized_once_and_finished(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    cfg = compose_eval(["model=tiny"])
    tracking = TrackingConfig(db_url=db, mlflow=False)
    recorder = RunRecorder(tracking)
    with pytest.raises(RuntimeError, match="the recorder has no run yet"):
        _ = recorder.run_id
    start = synthetic_start(cfg, n_questions=4)
    try:
        assert recorder.claim(start, "i" * 64, tmp_path) == {}
        recorder.commit(_unit("anatomy", 3))
        recorder.commit(_unit("virology", 1))
        assert recorder.committed_by_subject() == {"anatomy": (3, 2), "virology": (1, 1)}
        recorder.end_shard(ShardWork())
        assert recorder.claim_finalization(4)
        assert not recorder.claim_finalization(4)  # exactly one process finalizes
        record = synthetic_record(recorder.run_id, cfg, "m", "f" * 64, aggregate(recorder.question_results()))
        recorder.finish(record, tmp_path)
        assert recorder.mirror_finished(record, recorder.question_results(), {}) is None  # MLflow off
        run_id = recorder.run_id
    finally:
        recorder.close()
    store = SqlStore(db)
    try:
        stored = store.get(run_id)
        assert stored is not None
        assert stored.status == RunStatus.FINISHED
        assert stored.acc_micro == 0.75
    finally:
        store.close()


def test_a_failed_run_is_resumed_with_what_it_committed(tmp_path: Path) -> None:
    tracking = TrackingConfig(db_url=f"sqlite:///{tmp_path / 'store.db'}", mlflow=False)
    start = synthetic_start(compose_eval(["model=tiny"]), n_questions=4)
    first = RunRecorder(tracking)
    try:
        first.claim(start, "i" * 64, tmp_path)
        first.commit(_unit("anatomy", 3))
        first.fail(RuntimeError("the server went away"))
        failed = first.store.get(first.run_id)
        assert failed is not None
        assert failed.status == RunStatus.FAILED
        run_id = first.run_id
    finally:
        first.close()
    again = RunRecorder(tracking)
    try:
        done = again.claim(start, "i" * 64, tmp_path)
        assert again.run_id == run_id
        assert {s: len(rs) for s, rs in done.items()} == {"anatomy": 3}
    finally:
        again.close()
