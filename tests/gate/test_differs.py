"""gate/differs.py: what differs between two runs of a comparison, as a reviewer reads it: every
setting that changes results with what it resolved to (`setting baseline → candidate`), the
settings that do not change them apart, and a title that says both."""

from __future__ import annotations

from pathlib import Path

from mmlu_track.gate.differs import NEUTRAL, neutral_differs, title, what_differs
from mmlu_track.records.stored import StoredRun
from mmlu_track.store.sql import SqlStore

from ..conftest import synthetic_run

CORRECT = {"anatomy": [True, False, True]}


def _runs(tmp_path: Path, *candidate: str, dtype: str | None = None) -> tuple[StoredRun, StoredRun]:
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        base = store.get(synthetic_run(store, "m", CORRECT))
        cand = store.get(synthetic_run(store, "m", CORRECT, dtype=dtype, extra=candidate))
    finally:
        store.close()
    assert base is not None
    assert cand is not None
    return base, cand


def test_a_setting_that_changes_results_is_said_with_what_it_resolved_to(tmp_path: Path) -> None:
    base, cand = _runs(tmp_path, dtype="bfloat16")
    # The setting with what it ran in (`auto (float32)`), said once: no `ran in` line beside it.
    assert what_differs(base, cand) == ["dtype auto (float32) → bfloat16"]
    assert neutral_differs(base, cand) == []
    assert title(base, cand, "gate") == "m, baseline → candidate: dtype auto (float32) → bfloat16"
    assert what_differs(base, base) == []
    assert title(base, base, "fewshot_gap") == "Few-shot gap of m: k=5 vs k=5"


def test_settings_that_do_not_change_results_are_said_apart(tmp_path: Path) -> None:
    base, cand = _runs(tmp_path, "batch_size=3")
    assert what_differs(base, cand) == []
    said = f"batch_size {base.config.batch_size} → 3"
    assert neutral_differs(base, cand) == [said]
    assert title(base, cand, "gate") == f"m, baseline → candidate: {said} ({NEUTRAL})"
