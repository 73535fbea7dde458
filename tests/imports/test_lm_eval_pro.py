"""imports/lm_eval_pro.py: lm-eval's MMLU-Pro task names, docs matched by question_id to the data
given, and a generated sample's parts, each malformed one refused in one line."""

from __future__ import annotations

import pytest

from mmlu_track.eval.data import DataError, Question
from mmlu_track.imports.lm_eval_pro import PRO_TASK, ProTests, cot_category, generation

Q = Question("math", "test", 0, "2+2?", ("4", "5", "6"), 0, qid=70, src="ori_mmlu-x")


def test_task_names_say_which_protocol_and_category() -> None:
    assert PRO_TASK == "leaderboard_mmlu_pro"
    assert cot_category("mmlu_pro_computer_science") == "computer science"
    assert cot_category("mmlu_pro_math") == "math"
    assert cot_category("mmlu_pro_maths") is None
    assert cot_category("mmlu_professional_law") is None


def test_a_doc_is_the_datas_question_of_its_id_once() -> None:
    tests = ProTests([Q], generated=True)
    doc = {"question_id": 70, "question": " 2+2? ", "options": ["4", " 5", "6"]}
    assert tests.match(doc, "f: line 1") is Q
    with pytest.raises(DataError, match=r"^f: line 2: the same question as line 1 \(logged twice\)$"):
        tests.match(doc, "f: line 2")
    with pytest.raises(DataError, match=r"question 70 is not the data's \(another revision"):
        ProTests([Q]).match({**doc, "options": ["4", "5"]}, "f: line 3")


def test_a_generated_sample_gives_its_context_text_and_lm_evals_answer() -> None:
    line = {"arguments": {"gen_args_0": {"arg_0": "ctx", "arg_1": {}}}, "resps": [["The answer is (B)."]],
            "filtered_resps": ["B"]}  # fmt: skip
    assert generation(line, "f: line 1") == ("ctx", "The answer is (B).", "B")
    assert generation({**line, "filtered_resps": ["[invalid]"]}, "f: line 1")[2] is None
    with pytest.raises(DataError, match=r"^f: line 4: a generated sample needs its context"):
        generation({**line, "resps": []}, "f: line 4")
