r"""MMLU-Pro's two log-likelihood prompt protocols, byte for byte: their headers and the
`category` question body over `Question`s (`eval.mmlu_pro`), formulations of `prompts` (which
renders them, shots from `mmlu_pro.shot_pool`). Both end a prompt with `Answer:` and score one
continuation per option of the question (`" A"` … up to `" J"`); shots end with `" X\n\n"`.

- `leaderboard`: lm-evaluation-harness's `leaderboard_mmlu_pro` (the Open LLM Leaderboard v2, lm-eval
  0.4.13's `tasks/leaderboard/mmlu_pro`): no header; the shots are the first 5 rows of the whole
  validation split (its `first_n` sampler: math's five, whatever the question's category), their
  `N/A` padding kept; each item `{question}\nA. {option}\n…\nAnswer:` with the options as published,
  so an option's leading space is kept — in 470 test questions the correct option alone has one: a
  model can read the answer off the whitespace. Its body is the `original` formulation's.
- `category` (the protocol the docs recommend for a gate): the header `The following are multiple
  choice questions (with answers) about {category}.\n\n`, the first k validation rows of the
  question's own category as shots with their `N/A` padding dropped, the question and every option
  stripped (no leak), the same layout otherwise.
"""

from __future__ import annotations

from mmlu_track.eval.data import Question
from mmlu_track.eval.mmlu_pro import OPTION_LETTERS, PAD


def leaderboard_header(category: str) -> str:
    """The `leaderboard` protocol's header: none."""
    return ""


def category_header(category: str) -> str:
    """The `category` protocol's header, naming the question's category."""
    return f"The following are multiple choice questions (with answers) about {category}.\n\n"


def category_body(question: Question) -> str:
    """A question (shot or asked) as `category` renders it up to `Answer:`: the question and every
    option stripped, `N/A` padding dropped."""
    options = [o.strip() for o in question.choices if o.strip() != PAD]
    lines = "".join(f"{OPTION_LETTERS[i]}. {o}\n" for i, o in enumerate(options))
    return f"{question.question.strip()}\n{lines}Answer:"
