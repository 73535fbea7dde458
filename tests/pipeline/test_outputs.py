"""pipeline/outputs.py: a run's files written whole or not at all, into a folder of its own where
another run's results are already; SIGTERM unwinding like Ctrl-C only where nobody else handles it;
the lines a run ends with."""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest

from mmlu_track.pipeline.outputs import (
    CLAIM_FILE,
    RESULTS_FILE,
    abandoned_line,
    own_folder,
    sigterm_as_exit,
    summary_line,
    write_json,
)
from mmlu_track.records.results import QuestionResult, aggregate

from ..conftest import compose_eval, synthetic_record


def test_a_run_writes_into_its_own_folder_and_its_json_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert own_folder(out, "a" * 32) == out  # made, and claimed
    assert own_folder(out, "c" * 32) == out / f"run-{'c' * 12}"  # before a's results exist: still a's
    write_json(out / RESULTS_FILE, {"run_id": "a" * 32, "note": "é"})
    assert sorted(p.name for p in out.iterdir()) == [CLAIM_FILE, RESULTS_FILE, f"run-{'c' * 12}"]  # no .tmp
    assert json.loads((out / RESULTS_FILE).read_text(encoding="utf-8"))["note"] == "é"
    assert own_folder(out, "a" * 32) == out  # its own results: the same folder (a resume)
    assert own_folder(out, "b" * 32) == out / f"run-{'b' * 12}"  # another run's: a subfolder
    (out / RESULTS_FILE).write_text("{half")  # unreadable: never written over either
    assert own_folder(out, "a" * 32) == out / f"run-{'a' * 12}"
    (out / RESULTS_FILE).write_text("[]")  # JSON, but not a run's results: neither
    assert own_folder(out, "a" * 32) == out / f"run-{'a' * 12}"
    older = tmp_path / "older"  # written before claims: its results.json alone says whose it is
    older.mkdir()
    write_json(older / RESULTS_FILE, {"run_id": "d" * 32})
    assert own_folder(older, "d" * 32) == older
    assert own_folder(older, "e" * 32) == older / f"run-{'e' * 12}"


def test_sigterm_unwinds_as_an_exit_only_where_nobody_handles_it() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with sigterm_as_exit():
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler)
            with pytest.raises(SystemExit) as stopped:
                handler(signal.SIGTERM, None)
            assert stopped.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

        def launchers(signum: int, frame: object) -> None:
            pass

        signal.signal(signal.SIGTERM, launchers)
        with sigterm_as_exit():
            assert signal.getsignal(signal.SIGTERM) is launchers  # a launcher's own: left alone
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_last_lines_say_what_was_scored_and_what_a_slow_server_cost(tmp_path: Path) -> None:
    cfg = compose_eval(["model=tiny"])
    right = [QuestionResult("anatomy", i, "h", 0, 1, False, None, "A", 0, 0, None) for i in range(10)]
    scores = aggregate(right)
    record = synthetic_record("r" * 32, cfg, "m", "f" * 64, scores)
    assert abandoned_line(record) is None
    slow = dataclasses.replace(
        record, timing=dataclasses.replace(record.timing, requests=40, abandoned_requests=3, abandoned_s=15.0)
    )
    assert abandoned_line(slow) == (
        "3 of 40 requests got no complete answer within model.timeout_s and were asked again "
        "(15.0 s waited on them; in results.json's timing)"
    )
    line = summary_line(record, 10, 4, 2.0, sharded=True, output_dir=tmp_path)
    assert line == (
        f"4 questions scored now in 2.0 s (2.00 q/s), 6 committed before or by other shards; "
        f"results in {tmp_path}; run {'r' * 32}"
    )
    assert summary_line(record, 4, 4, 2.0, sharded=False, output_dir=tmp_path).startswith(
        "4 questions in 2.0 s (2.00 q/s); results in"
    )
