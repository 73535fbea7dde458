"""store/rows.py: the one mapping between typed records and the store's rows: a question result
read back from its columns as it was written (rotations and annotation included), a run's start as
the row every reader gets as a `StoredRun`, and which batching a run was scored at."""

from __future__ import annotations

from mmlu_track.records.results import QuestionResult, RotatedAnswer
from mmlu_track.records.stored import RunStatus
from mmlu_track.store.rows import COLUMNS, batched_as, from_columns, new_run, provisional, to_row

from ..conftest import compose_eval, synthetic_start

LOGPROBS = (-0.5, -1.25, -2.0, -3.5)


def test_a_question_result_is_read_back_from_its_columns_as_it_was_written() -> None:
    results = [
        QuestionResult("anatomy", 3, "abc", 5, 812, False, LOGPROBS, None, 1, 1, 0.75, "logits",
                       (RotatedAnswer(2, LOGPROBS), RotatedAnswer(None), RotatedAnswer(0)), "ok"),
        QuestionResult("virology", 0, "def", 0, 90, True, None, " B.", None, 2, None, "greedy"),
    ]  # fmt: skip
    for r in results:
        row = to_row("run-1", r)
        assert (row.run_id, row.correct) == ("run-1", r.correct)
        assert from_columns([getattr(row, c.key) for c in COLUMNS]) == r


def test_a_runs_start_is_its_row_and_what_readers_get() -> None:
    cfg = compose_eval(["model=tiny", "batch_size=8"])
    start = synthetic_start(cfg, "tiny-m", n_questions=12)
    row = new_run(start, "i" * 64, "/out")
    assert (row.status, row.identity, row.model_name, row.k, row.n_questions) == (
        RunStatus.RUNNING, "i" * 64, "tiny-m", cfg.k, 12,
    )  # fmt: skip
    assert row.model_revision == "r1"  # the weights' revision, else their hash
    assert batched_as(row, None)
    assert batched_as(row, (8, cfg.batch_tokens))
    assert not batched_as(row, (1, cfg.batch_tokens))
    run = provisional(start, "i" * 64)  # the run about to start, as a reader would see it
    assert (run.status, run.identity, run.output_dir) == (RunStatus.RUNNING, "i" * 64, None)
    assert run.config == cfg
    assert run.protocol == start.protocol
