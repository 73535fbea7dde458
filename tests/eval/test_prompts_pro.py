"""eval/prompts_pro.py: MMLU-Pro's log-likelihood prompts. `leaderboard` equals lm-eval 0.4.13's own
`leaderboard_mmlu_pro` contexts, logged on this project's own rows in the hub's layout
(`tests/data/lm_eval_pro/`, its make.py) and, where the shared copy exists, on the real question 70
(`prompts_q70_business.json`, made by lm-eval itself); what each protocol keeps, strips and drops."""

from __future__ import annotations

import json

import pytest

from mmlu_track.eval import mmlu_pro, prompts, prompts_pro
from mmlu_track.eval.backend import LetterRequest
from mmlu_track.eval.data import DataError, Question, SubjectData

from ..conftest import LM_EVAL_DATA, require_shared
from .test_mmlu_pro import SHARED

PHYSICS = Question("physics", "test", 0, " Which? ", (" right", "wrong", "also wrong"), 0, qid=70, src="x")
SHOT = Question("math", "validation", 0, "2+2?", ("4", " 5", "N/A", "N/A"), 0, qid=0, src="y")
OWN = Question("physics", "validation", 5, "Up?", ("yes", "no"), 1, qid=5, src="y")
DATA = mmlu_pro.ProData(
    {"physics": SubjectData("physics", (OWN,), (PHYSICS,)),
     "math": SubjectData("math", (SHOT,), ())},
    (SHOT, OWN), "test rows",
)  # fmt: skip


LEADERBOARD_SHOTS = 5  # leaderboard_mmlu_pro's num_fewshot


def _render(formulation: str, shots: tuple[Question, ...], q: Question) -> str:
    """A prompt as a run renders it (`prompts.render`, the protocols' headers and bodies)."""
    return prompts.render(formulation, q.subject, shots, q)


def _shots(data: mmlu_pro.ProData, formulation: str, category: str, k: int) -> tuple[Question, ...]:
    """A run's shots: the first k of the protocol's pool (`mmlu_pro.shot_pool`)."""
    return mmlu_pro.shot_pool(data, formulation, category, k)[:k]


def _continuations(q: Question) -> tuple[str, ...]:
    """What a run scores after the prompt: its letter request's continuations."""
    return LetterRequest("", options=len(q.choices)).continuations


def test_the_leaderboard_protocol_keeps_what_is_published() -> None:
    got = _render("leaderboard", _shots(DATA, "leaderboard", "physics", 1), PHYSICS)
    # no header; the first validation row whatever the category; N/A and leading spaces kept
    shot = "2+2?\nA. 4\nB.  5\nC. N/A\nD. N/A\nAnswer: A\n\n"
    assert got == shot + " Which? \nA.  right\nB. wrong\nC. also wrong\nAnswer:"
    assert _continuations(PHYSICS) == (" A", " B", " C")


def test_the_category_protocol_strips_drops_the_padding_and_names_the_category() -> None:
    got = _render("category", _shots(DATA, "category", "physics", 1), PHYSICS)
    assert got == (
        "The following are multiple choice questions (with answers) about physics.\n\n"
        "Up?\nA. yes\nB. no\nAnswer: B\n\nWhich?\nA. right\nB. wrong\nC. also wrong\nAnswer:"
    )
    math = _render("category", (SHOT,), PHYSICS)
    assert "A. 4\nB. 5\nAnswer: A" in math  # a shot's N/A padding dropped, its options stripped
    assert prompts_pro.category_body(SHOT) == "2+2?\nA. 4\nB. 5\nAnswer:"


def test_too_few_shots_are_refused() -> None:
    with pytest.raises(DataError, match="category 'physics' has 1 validation rows, fewer than k=2"):
        _shots(DATA, "category", "physics", 2)
    with pytest.raises(DataError, match="the validation split has 2 rows, fewer than k=5"):
        _shots(DATA, "leaderboard", "physics", 5)


GOLDEN = SHARED / "prompts_q70_business.json"


def test_the_leaderboard_prompt_is_lm_evals_own_byte_for_byte() -> None:
    require_shared(GOLDEN)
    data = mmlu_pro.load_local(SHARED)
    gold = json.loads(GOLDEN.read_text())["lm_eval_0.4.13_leaderboard_mmlu_pro"]
    (q70,) = [q for q in data.categories["business"].test if q.qid == 70]
    shots = _shots(data, "leaderboard", "business", LEADERBOARD_SHOTS)
    assert _render("leaderboard", shots, q70) == gold["context"]
    assert list(_continuations(q70)) == gold["continuations"]  # 9 options: " A" … " I"


LM_EVAL_PRO = LM_EVAL_DATA.parent / "lm_eval_pro"  # its make.py: own rows, lm-eval 0.4.13's output on them


def test_the_leaderboard_prompts_are_lm_evals_own_on_this_projects_rows() -> None:
    """lm-eval's `leaderboard_mmlu_pro` itself, logged on questions of 3, 4, 9 and 10 options, one whose
    answer alone has a leading space, and N/A-padded shots: every context and continuation equal."""
    data = mmlu_pro.load_local(LM_EVAL_PRO / "data")
    by_id = {q.qid: q for c in data.categories.values() for q in c.test}
    (samples,) = (LM_EVAL_PRO / "leaderboard").rglob("samples_leaderboard_mmlu_pro_*.jsonl")
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    assert sorted(len(by_id[d["doc"]["question_id"]].choices) for d in lines) == [3, 4, 4, 9, 10, 10]
    assert any(o.startswith(" ") for d in lines for o in d["doc"]["options"])
    shots = _shots(data, "leaderboard", "math", LEADERBOARD_SHOTS)
    assert any(mmlu_pro.PAD in s.choices for s in shots)
    for line in lines:
        q = by_id[line["doc"]["question_id"]]
        asked = list(line["arguments"].values())
        assert {a["arg_0"] for a in asked} == {_render("leaderboard", shots, q)}
        assert tuple(a["arg_1"] for a in asked) == _continuations(q)
