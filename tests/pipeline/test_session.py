"""pipeline/session.py: one process's evaluation of one run: it claims the run, scores its shard's
units, and the process that commits the last one finalizes the run (files, SQL record); a shard
left without a unit claims nothing and makes no store."""

from __future__ import annotations

import json
from pathlib import Path

from mmlu_track.pipeline.outputs import PREDICTIONS_FILE, RESULTS_FILE
from mmlu_track.pipeline.prepare import Origin, prepare
from mmlu_track.pipeline.resolve import resolve
from mmlu_track.pipeline.session import QUIET, Display, EvaluationSession, acc
from mmlu_track.records.stored import RunStatus
from mmlu_track.store.liveness import Shard
from mmlu_track.store.recorder import RunRecorder
from mmlu_track.store.sql import SqlStore

from ..conftest import tiny_run_cfg


def test_a_session_scores_its_units_and_finalizes_the_run(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    cfg = tiny_run_cfg(f"sqlite:///{db}", "subjects=[anatomy,virology]", "limit=2", "k=0")
    prep = prepare(cfg, Origin(), resolve(cfg))
    lines: list[str] = []
    try:
        idle = RunRecorder(cfg.tracking, Shard(7, 8))  # more shards than units: nothing to score
        session = EvaluationSession(cfg, prep, idle, tmp_path / "idle", display=QUIET)
        assert len(session.everything) < 8
        out = session.run()
        assert (out.run_id, out.results, out.record) == (None, [], None)
        assert not db.exists()  # no run claimed, no store made
        recorder = RunRecorder(cfg.tracking)
        try:
            shown = Display(lines.append, progress=False)
            out = EvaluationSession(cfg, prep, recorder, tmp_path / "out", display=shown).run()
        finally:
            recorder.close()
    finally:
        prep.lm.close()
    assert out.run_id is not None
    assert out.record is not None
    assert len(out.results) == 4
    assert out.record.scores.micro == acc(out.results)
    assert json.loads((tmp_path / "out" / RESULTS_FILE).read_text())["run_id"] == out.run_id
    assert len((tmp_path / "out" / PREDICTIONS_FILE).read_text().splitlines()) == 4
    store = SqlStore(f"sqlite:///{db}")
    try:
        (run,) = store.runs()
        assert (run.id, run.status) == (out.run_id, RunStatus.FINISHED)
        assert len(store.question_results(run.id)) == 4
    finally:
        store.close()
    assert lines[-1].startswith("4 questions in ")
    assert lines[-1].endswith(f"; results in {tmp_path / 'out'}; run {out.run_id}")
