"""eval/data.py: a whole-split file is read once per run, and anew when it changes at the same path."""

from __future__ import annotations

import json
from pathlib import Path

from mmlu_track.eval.data import load_subjects
from mmlu_track.settings.config import DataConfig


def _write(path: Path, answer: int, question: str) -> None:
    row = {"subject": "anatomy", "question": question, "choices": ["a", "b", "c", "d"], "answer": answer}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")


def test_a_split_file_changed_at_the_same_path_is_read_again(tmp_path: Path) -> None:
    """The cache was keyed by the path alone: a file rewritten there was served stale."""
    cfg = DataConfig(name="local", source="local", path=str(tmp_path))
    _write(tmp_path / "dev" / "anatomy.jsonl", 1, "A shot?")  # per subject: the split file alone is cached
    _write(tmp_path / "test.jsonl", 0, "Which bone?")
    assert load_subjects(cfg, ["anatomy"])["anatomy"].test[0].answer == 0
    _write(tmp_path / "test.jsonl", 2, "Which bone is longest?")
    (test,) = load_subjects(cfg, ["anatomy"])["anatomy"].test
    assert (test.answer, test.question) == (2, "Which bone is longest?")
