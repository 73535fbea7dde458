"""eval/prompts_cot.py: MMLU-Pro's chain-of-thought prompts in both published renderings, byte for
byte: the official `evaluate_from_local.py`'s and lm-eval 0.4.13's `mmlu_pro` task's, on the real
question 70 where the shared copy exists (`prompts_q70_business.json`: lm-eval's own contexts and the
official script's logic run on the release), and what each keeps, strips and drops on rows of our own."""

from __future__ import annotations

import json

from mmlu_track.eval import mmlu_pro, prompts
from mmlu_track.eval.data import Question

from ..conftest import require_shared
from .test_mmlu_pro import SHARED

GOLDEN = SHARED / "prompts_q70_business.json"
COT = "A: Let's think step by step. Two and two make four. The answer is (A)."
SHOT = Question("math", "validation", 0, "2+2?", ("4", " 5", "N/A"), 0, qid=0, src="y", cot=COT)
ASKED = Question("math", "test", 3, "3+3?", (" 6", "7"), 0, qid=9, src="ori_mmlu-x")
HEADER = (
    "The following are multiple choice questions (with answers) about math. Think step by step and then "
    'finish your answer with "the answer is (X)" where X is the correct letter choice.'
)


def test_the_official_rendering_drops_padding_keeps_spaces_and_opens_with_four_newlines() -> None:
    got = prompts.render("cot_official", "math", [SHOT], ASKED)
    assert got == (
        f"{HEADER}\n\n\n\nQuestion:\n2+2?\nOptions:\nA. 4\nB.  5\n"
        "Answer: Let's think step by step. Two and two make four. The answer is (A).\n\n"
        "Question:\n3+3?\nOptions:\nA.  6\nB. 7\nAnswer: Let's think step by step."
    )


def test_the_lm_eval_rendering_strips_options_keeps_padding_and_opens_with_one_newline() -> None:
    got = prompts.render("cot_lm_eval", "math", [SHOT], ASKED)
    assert got == (
        f"{HEADER}\nQuestion:\n2+2?\nOptions:\nA. 4\nB. 5\nC. N/A\n"
        "Answer: Let's think step by step. Two and two make four. The answer is (A).\n\n"
        "Question:\n3+3?\nOptions:\nA. 6\nB. 7\nAnswer: Let's think step by step."
    )


def test_a_chat_shot_answers_with_its_reasoning() -> None:
    msgs = prompts.messages("cot_lm_eval", "math", [SHOT], ASKED, chat="multiturn", system=None)
    assert msgs[2] == {"role": "assistant", "content": "Two and two make four. The answer is (A)."}
    assert msgs[1]["content"].endswith("Answer: Let's think step by step.")


def test_both_renderings_are_the_published_ones_byte_for_byte_on_question_70() -> None:
    require_shared(GOLDEN)
    golden = json.loads(GOLDEN.read_text())
    data = mmlu_pro.load_local(SHARED)
    (q70,) = [q for q in data.categories["business"].test if q.qid == 70]
    shots = mmlu_pro.shot_pool(data, "category", "business", 5)[:5]
    official = golden["official_evaluate_from_local"]
    assert prompts.render("cot_official", "business", shots, q70) == official["prompt"]
    assert official["sampling"]["stop"] == ["Question:"]
    lm_eval = golden["lm_eval_0.4.13_mmlu_pro_business"]
    assert prompts.render("cot_lm_eval", "business", shots, q70) == lm_eval["context"]
    said = str(lm_eval["gen_kwargs"])  # as lm-eval printed its generation settings
    assert "'until': ['Question:']" in said
    assert "'max_gen_toks': 2048" in said


def test_scoring_cot_generates_as_both_scripts_do() -> None:
    from mmlu_track.eval import prompts_cot

    from ..conftest import compose_eval

    cfg = compose_eval(["benchmark=mmlu_pro", "data=mmlu_pro_local", "data.path=/d", "scoring=cot",
                        "formulation=cot_official"])  # fmt: skip
    assert (cfg.scoring.stop, cfg.scoring.max_new_tokens) == (prompts_cot.STOP, prompts_cot.MAX_NEW_TOKENS)
    assert (cfg.scoring.method, cfg.scoring.extract, cfg.scoring.failed) == ("generate", "cascade", "wrong")
    assert prompts_cot.reasoning(SHOT) == "Two and two make four. The answer is (A)."
