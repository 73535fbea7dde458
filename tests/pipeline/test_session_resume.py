"""A run killed midway (SIGKILL or SIGINT) resumes where it stopped and ends as an uninterrupted run;
and it resumes only into the same weights, however they were put in place."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mmlu_track.eval.fingerprint import cached_sha256, file_sha256
from mmlu_track.pipeline.evaluate import QUIET, run
from mmlu_track.store.orm import QuestionRow, Run
from mmlu_track.store.sql import SqlStore

from .. import processes
from ..conftest import CliResult, tiny_run_cfg

SUBJECTS = "[high_school_psychology,professional_law,miscellaneous,moral_scenarios]"
LIMIT = 40  # a unit per subject: killed after one, three are left to resume
ARGS = ["k=2", f"subjects={SUBJECTS}", f"limit={LIMIT}"]


def _start(db: str, out: Path, *batching: str) -> processes.Popen:
    cmd = [
        "-m", "mmlu_track", "experiment=smoke", "model=fake", "model.fake_seconds_per_question=0.02",
        "device=cpu", "tracking=sql_only",
        f"tracking.db_url={db}", *ARGS, *(batching or ["batch_size=4"]), f"hydra.run.dir={out}",
    ]  # fmt: skip
    env = {**os.environ, "HYDRA_FULL_ERROR": ""}
    return processes.Popen(cmd, cwd=out.parent, env=env)


def _committed_subjects(store: SqlStore) -> int:
    with Session(store.engine) as s:
        return int(s.scalar(select(func.count(QuestionRow.subject.distinct()))) or 0)


# SIGKILL: nothing is marked. (Ctrl-C and SIGTERM resumes: tests/test_failures.py,
# tests/store/mlflow/test_live_lifecycle.py.)
@pytest.mark.parametrize("sig", [signal.SIGKILL])
def test_killed_run_resumes_and_equals_an_uninterrupted_run(tmp_path: Path, sig: signal.Signals) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(db)
    proc = _start(db, tmp_path / "first")
    deadline = time.time() + 240
    while _committed_subjects(store) < 1:
        assert proc.poll() is None, f"finished before it could be killed: {proc.communicate()}"
        assert time.time() < deadline, "no subject was committed in time"
        time.sleep(0.05)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    with Session(store.engine) as s:
        (killed,) = s.scalars(select(Run))
        assert killed.status in ("running", "failed")  # SIGKILL leaves "running", SIGINT marks "failed"
    done_before = _committed_subjects(store)
    assert 1 <= done_before < 4

    # Resumed with other batching (what one does after running out of memory): still the same run.
    second = _start(db, tmp_path / "second", "batch_size=2", "batch_tokens=null")
    stdout, stderr = second.communicate(timeout=300)
    assert second.returncode == 0, stderr
    committed = f"{LIMIT * done_before} of {4 * LIMIT} questions were committed"
    assert f"resuming run {killed.id}: {committed}" in stdout

    reference = run(
        tiny_run_cfg(f"sqlite:///{tmp_path / 'ref.db'}", *ARGS),
        tmp_path / "ref",
        display=QUIET,
    )
    resumed = store.get(killed.id)
    assert resumed is not None
    assert resumed.status == "finished"
    got = store.question_results(killed.id)
    want = sorted(reference.results, key=lambda r: (r.subject, r.index))
    # Identical answers; log-probs equal up to the float rounding that other batch shapes give.
    assert [_exact_part(r) for r in got] == [_exact_part(r) for r in want]
    np.testing.assert_allclose([r.logprobs for r in got], [r.logprobs for r in want], atol=1e-5)
    assert resumed.acc_micro == reference.scores.micro.acc
    files = [(tmp_path / d / "predictions.jsonl").read_text().splitlines() for d in ("second", "ref")]
    lines = [[_exact_part(json.loads(line)) for line in f] for f in files]
    assert lines[0] == lines[1]


def _exact_part(r: Any) -> dict[str, Any]:
    d = dict(r) if isinstance(r, dict) else dataclasses.asdict(r)
    return {k: v for k, v in d.items() if k not in ("logprobs", "margin")}


def test_weights_are_hashed_again_whenever_the_file_is_not_the_one_hashed(tmp_path: Path) -> None:
    """The cached hash is reused only while the file is untouched: other bytes of the same size
    written with the old mtime put back (`touch -r`), or another file of the same size and mtime
    moved in its place (`cp -p`, `rsync -t`), are read again."""
    cache, weights = tmp_path / "cache", tmp_path / "model.gguf"
    weights.write_bytes(b"a" * 4096)
    first = cached_sha256([weights], cache)
    assert first == [file_sha256(weights)]
    stamp = weights.stat()
    weights.write_bytes(b"b" * 4096)
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    second = cached_sha256([weights], cache)
    assert second == [file_sha256(weights)] != first
    other = tmp_path / "other.gguf"
    other.write_bytes(b"c" * 4096)
    os.utime(other, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    os.replace(other, weights)
    assert cached_sha256([weights], cache) == [file_sha256(weights)] != second
    entry = json.loads((cache / "file_sha256.json").read_text())[str(weights.resolve())]
    assert entry[:2] == [4096, stamp.st_mtime_ns]  # the same size and mtime throughout
    (cache / "file_sha256.json").write_text("[1, 2]")  # damaged: read again, never a traceback
    assert cached_sha256([weights], cache) == [file_sha256(weights)]


def test_a_ctrl_c_while_finalizing_leaves_the_run_failed_and_resumable_never_finalizing(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 52: Ctrl-C in the noise command left a run `finalizing` that no process owned."""
    from mmlu_track.records.stored import RunStatus
    from mmlu_track.store.recorder import RunRecorder

    db = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["experiment=smoke", "device=cpu", "tracking=sql_only", f"tracking.db_url={db}"]

    def ctrl_c(*_: Any) -> None:
        raise KeyboardInterrupt

    real_finish = RunRecorder.finish
    monkeypatch.setattr(RunRecorder, "finish", ctrl_c)  # as the store is about to be told: finalizing
    got = cli("eval", *args, f"hydra.run.dir={tmp_path / 'a'}", cwd=tmp_path)
    assert got.code == 130, got.err
    store = SqlStore(db)
    ((run_id, status),) = [(r.id, r.status) for r in store.runs()]
    assert status == RunStatus.FAILED  # before: finalizing
    monkeypatch.setattr(RunRecorder, "finish", real_finish)
    monkeypatch.setattr(RunRecorder, "mirror_finished", ctrl_c)  # once the store has it finished
    got = cli("eval", *args, f"hydra.run.dir={tmp_path / 'b'}", cwd=tmp_path)
    assert got.code == 130, got.err
    assert f"resuming run {run_id}" in got.out
    assert [(r.id, r.status) for r in store.runs()] == [(run_id, RunStatus.FINISHED)]  # stays finished
    store.close()
