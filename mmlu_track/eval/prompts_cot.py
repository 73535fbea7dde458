r"""MMLU-Pro's chain-of-thought prompts (the paper's protocol), byte for byte in both published
renderings: pure functions over `Question`s (`eval.mmlu_pro`), formulations of `prompts`.

Both: the header `The following are multiple choice questions (with answers) about {category}. Think
step by step and then finish your answer with "the answer is (X)" where X is the correct letter
choice.`, the first k validation rows of the question's category as worked examples, each
`Question:\n{question}\nOptions:\nA. {option}\n…Answer: Let's think step by step. {reasoning}\n\n`
(the validation row's `cot_content`, whose `A: Let's think step by step.` opens the answer), and the
test question ending `Answer: Let's think step by step.`: the model writes its reasoning and its
answer, and generation stops at `Question:`.

- `cot_official`: TIGER-AI-Lab's `evaluate_from_local.py` (the paper's numbers): the header file's own
  newlines and one more after the header (`\n\n\n\n`), options as published, the shots' `N/A` padding
  dropped (its `preprocess`).
- `cot_lm_eval`: lm-evaluation-harness 0.4.13's `mmlu_pro` task (version 3.1): one `\n` after the
  header, every option stripped, `N/A` options kept; a shot is its question, `" "` and its reasoning
  without the leading `A: Let's think step by step. ` (its `fewshot_to_target`).

With a chat template each shot is a user turn (its question, ending `Answer: Let's think step by
step.`) and an assistant turn (its reasoning, `answer`).
"""

from __future__ import annotations

from mmlu_track.eval.data import Question
from mmlu_track.eval.mmlu_pro import OPTION_LETTERS, PAD

LEAD = "Answer: Let's think step by step."  # ends every question asked; opens every shot's answer
_COT_LEAD = "A: Let's think step by step."  # how the validation rows' cot_content starts
STOP = ("Question:",)  # where a generation ends (both renderings)
MAX_NEW_TOKENS = 2048  # both renderings' generation limit
_HEADER = (
    "The following are multiple choice questions (with answers) about {}. Think step by step and then "
    'finish your answer with "the answer is (X)" where X is the correct letter choice.'
)


def _item(question: Question, *, stripped: bool, padded: bool) -> str:
    options = [o for o in question.choices if padded or o.strip() != PAD]
    lines = "".join(f"{OPTION_LETTERS[i]}. {o.strip() if stripped else o}\n" for i, o in enumerate(options))
    return f"Question:\n{question.question}\nOptions:\n{lines}"


def official_header(category: str) -> str:
    """`cot_official`'s header: the instruction, then the header file's newlines and one more."""
    return _HEADER.format(category) + "\n\n\n\n"


def official_body(question: Question) -> str:
    """A question as `cot_official` asks it: as published, `N/A` padding dropped, then `LEAD`."""
    return _item(question, stripped=False, padded=False) + LEAD


def official_shot(shot: Question) -> str:
    """A worked example as `cot_official` shows it: its question and its reasoning as the answer."""
    return _item(shot, stripped=False, padded=False) + (shot.cot or "").replace(_COT_LEAD, LEAD) + "\n\n"


def lm_eval_header(category: str) -> str:
    """`cot_lm_eval`'s header (its task's `description`): the instruction and one newline."""
    return _HEADER.format(category) + "\n"


def lm_eval_body(question: Question) -> str:
    """A question as `cot_lm_eval` asks it: options stripped, `N/A` kept, then `LEAD`."""
    return _item(question, stripped=True, padded=True) + LEAD


def reasoning(shot: Question) -> str:
    """A worked example's reasoning after `LEAD` (lm-eval's `fewshot_to_target`): the chat answer."""
    return (shot.cot or "").replace(_COT_LEAD + " ", "")


def lm_eval_shot(shot: Question) -> str:
    r"""A worked example as `cot_lm_eval` shows it: its question, `" "`, its reasoning, `\n\n`."""
    return f"{lm_eval_body(shot)} {reasoning(shot)}\n\n"
