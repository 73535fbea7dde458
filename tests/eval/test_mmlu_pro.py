"""eval/mmlu_pro.py: MMLU-Pro in the hub's layout (JSONL or Parquet) as validated `Question`s, each
category a subject; what the rows publish kept as it is; every malformed row one line naming the file
and row; and, where `../shared/data/mmlu-pro` exists, the real release's counts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from mmlu_track.eval import mmlu_pro
from mmlu_track.eval.data import DataError, Question, fingerprint
from mmlu_track.records.results import FROM_MMLU

from ..conftest import SHARED_DIR, require_shared

LETTERS = mmlu_pro.OPTION_LETTERS


def _row(
    qid: int, category: str, options: list[str], answer: int, src: str = "stemez-Physics"
) -> dict[str, Any]:
    return {"question_id": qid, "question": f"Question {qid}?", "options": options,
            "answer": LETTERS[answer], "answer_index": answer, "cot_content": "", "category": category,
            "src": src}  # fmt: skip


def _validation() -> list[dict[str, Any]]:
    """5 rows for math and for physics, padded to 10 options with N/A as the release's are."""
    rows = []
    for n, category in enumerate(("math", "physics")):
        for i in range(5):
            options = [f"v{i}{j}" for j in range(4)] + [mmlu_pro.PAD] * 6
            rows.append(_row(n * 5 + i, category, options, i % 4, src="cot_lib-abstract_algebra"))
    return rows


def _test() -> list[dict[str, Any]]:
    return [
        _row(70, "physics", ["a", "b", "c"], 2),  # 3 options
        _row(71, "math", [f"o{j}" for j in range(10)], 9, src="ori_mmlu-college_mathematics"),  # 10
        _row(72, "math", ["x", " the answer", "y", "z"], 1),  # the whitespace leak
        _row(73, "physics", ["p", "q", "r", "s"], 0),
    ]


def _folder(tmp_path: Path, validation: list[dict[str, Any]] | None = None,
            test: list[dict[str, Any]] | None = None) -> Path:  # fmt: skip
    for name, rows in (("validation", validation or _validation()), ("test", test or _test())):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_rows_are_read_as_published_each_category_a_subject(tmp_path: Path) -> None:
    data = mmlu_pro.load_local(_folder(tmp_path))
    assert set(data.categories) == {"math", "physics"}  # categories with test questions
    math = data.categories["math"]
    assert [len(q.choices) for q in math.test] == [10, 4]
    assert [q.qid for q in math.test] == [71, 72]
    assert math.test[0].src == "ori_mmlu-college_mathematics"
    assert math.test[1].choices[1] == " the answer"  # the leading space kept: the prompt decides
    assert math.dev[0].choices[4:] == (mmlu_pro.PAD,) * 6  # the padding kept (lm-eval's leaderboard keeps it)
    assert [q.answer for q in data.categories["physics"].test] == [2, 0]
    assert len(data.validation) == 10
    assert data.validation[0].subject == "math"
    assert mmlu_pro.shot_pool(data, "category", "physics", 5)[:5] == data.categories["physics"].dev
    assert mmlu_pro.leaks(q for c in data.categories.values() for q in c.test) == [math.test[1]]


def test_the_hubs_parquet_layout_reads_the_same(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    for name, rows in (("validation", _validation()), ("test", _test())):
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / f"{name}-00000-of-00001.parquet")
    from_parquet = mmlu_pro.load_local(tmp_path)
    (tmp_path / "jsonl").mkdir()
    from_jsonl = mmlu_pro.load_local(_folder(tmp_path / "jsonl"))
    assert from_parquet.categories == from_jsonl.categories


def test_an_mmlu_questions_fingerprint_is_as_before_and_mmlu_pros_hold_their_ids() -> None:
    q = Question("anatomy", "test", 3, "Q?", ("a", "b", "c", "d"), 1)
    before = hashlib.sha256()
    before.update(json.dumps(["anatomy", "test", 3, "Q?", ["a", "b", "c", "d"], 1], ensure_ascii=False,
                             separators=(",", ":")).encode() + b"\n")  # fmt: skip
    assert fingerprint([q]) == before.hexdigest()  # stored MMLU runs keep their fingerprints
    pro = Question("math", "test", 3, "Q?", ("a", "b", "c", "d"), 1, qid=70, src="stemez-x")
    assert fingerprint([pro]) != fingerprint([q])


def _edit(rows: list[dict[str, Any]], **change: Any) -> list[dict[str, Any]]:
    return [dict(rows[0], **change), *rows[1:]]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            {"options": [f"o{j}" for j in range(11)]},
            "11 options (11 not N/A): MMLU-Pro questions have 2 to 10",
        ),
        ({"options": ["only", "N/A", "N/A"], "answer": "A", "answer_index": 0}, "3 options (1 not N/A)"),
        ({"answer": "E", "answer_index": 4}, "answer 'E' is not a letter of its 3 options (A-C)"),
        ({"answer": "K", "answer_index": 10}, "answer 'K' is not a letter of its 3 options"),
        ({"answer": "AB", "answer_index": 0}, "answer 'AB' is not a letter of its 3 options"),
        ({"answer": "", "answer_index": 0}, "answer '' is not a letter of its 3 options"),
        ({"answer_index": 0}, "answer 'C' and answer_index 0 disagree"),
        (
            {"options": ["a", "N/A", "c"], "answer": "B", "answer_index": 1},
            "the answer B is a N/A padding option",
        ),
        (
            {"options": ["a", "b", "N/A"], "answer": "A", "answer_index": 0},
            "option C is N/A: a test question's options are its own",
        ),
        ({"category": "maths"}, "unknown category 'maths' (did you mean 'math'?)"),
        ({"question": "  "}, "question is empty or not text"),
        ({"options": "a, b, c"}, "options must be a list of texts"),
    ],
)
def test_a_malformed_row_is_one_line_naming_the_file_and_row(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    folder = _folder(tmp_path, test=_edit(_test(), **change))
    with pytest.raises(DataError) as got:
        mmlu_pro.load_local(folder)
    (line,) = str(got.value).splitlines()
    assert f"{folder / 'test.jsonl'}: test row 1: " in line
    assert said in line


def test_too_few_shots_and_missing_splits_are_one_line(tmp_path: Path) -> None:
    data = mmlu_pro.load_local(_folder(tmp_path, validation=_validation()[:8]))  # physics: 3 rows
    with pytest.raises(DataError, match=r"category 'physics' has 3 validation rows, fewer than k=5 shots"):
        mmlu_pro.shot_pool(data, "category", "physics", 5)[:5]
    (tmp_path / "validation.jsonl").unlink()
    with pytest.raises(DataError, match=r"has no validation split: expected validation.jsonl or data/"):
        mmlu_pro.load_local(tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        mmlu_pro.load_local(tmp_path / "nowhere")


SHARED = SHARED_DIR / "data" / "mmlu-pro"  # the team's shared folder (conftest.SHARED_DIR)


def test_the_real_release_reads_with_its_published_counts() -> None:
    require_shared(SHARED / "test.jsonl")
    data = mmlu_pro.load_local(SHARED)
    tests = [q for c in data.categories.values() for q in c.test]
    assert len(tests) == 12_032
    assert len(data.categories) == 14
    assert (len(data.categories["biology"].test), len(data.categories["math"].test)) == (717, 1_351)
    sizes: dict[int, int] = {}
    for q in tests:
        sizes[len(q.choices)] = sizes.get(len(q.choices), 0) + 1
    assert sizes == {3: 20, 4: 607, 5: 52, 6: 93, 7: 158, 8: 320, 9: 801, 10: 9_981}
    assert sum(q.src is not None and q.src.startswith(FROM_MMLU) for q in tests) == 6_810
    assert all(len(c.dev) == 5 for c in data.categories.values())
    assert len(mmlu_pro.leaks(tests)) == 470
