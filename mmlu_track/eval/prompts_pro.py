r"""MMLU-Pro's two log-likelihood prompt protocols, byte for byte: pure functions over `Question`s
(`eval.mmlu_pro`). Both end a prompt with `Answer:` and score one continuation per option of the
question (`" A"` … up to `" J"`); shots end with `" X\n\n"`.

- `leaderboard`: lm-evaluation-harness's `leaderboard_mmlu_pro` (the Open LLM Leaderboard v2, lm-eval
  0.4.13's `tasks/leaderboard/mmlu_pro`): no header; the shots are the first 5 rows of the whole
  validation split (its `first_n` sampler: math's five, whatever the question's category), their
  `N/A` padding kept; each item `{question}\nA. {option}\n…\nAnswer:` with the options as published,
  so an option's leading space is kept — in 470 test questions the correct option alone has one: a
  model can read the answer off the whitespace.
- `category` (the protocol the docs recommend for a gate): the header `The following are multiple
  choice questions (with answers) about {category}.\n\n`, the first k validation rows of the
  question's own category as shots with their `N/A` padding dropped, the question and every option
  stripped (no leak), the same layout otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmlu_track.eval.data import DataError, Question
from mmlu_track.eval.mmlu_pro import OPTION_LETTERS, PAD, ProData, shots

PROTOCOLS = ("leaderboard", "category")
LEADERBOARD_SHOTS = 5  # leaderboard_mmlu_pro's num_fewshot


def _item(question: Question, *, stripped: bool) -> str:
    options = [o for o in question.choices if not stripped or o.strip() != PAD]
    text = question.question.strip() if stripped else question.question
    lines = "".join(f"{OPTION_LETTERS[i]}. {o.strip() if stripped else o}\n" for i, o in enumerate(options))
    return f"{text}\n{lines}Answer:"


def leaderboard_header(category: str) -> str:
    """The `leaderboard` protocol's header: none."""
    return ""


def category_header(category: str) -> str:
    """The `category` protocol's header, naming the question's category."""
    return f"The following are multiple choice questions (with answers) about {category}.\n\n"


def leaderboard_body(question: Question) -> str:
    """A question (shot or asked) as `leaderboard` renders it up to `Answer:`: as published."""
    return _item(question, stripped=False)


def category_body(question: Question) -> str:
    """A question (shot or asked) as `category` renders it up to `Answer:`: stripped, no `N/A`."""
    return _item(question, stripped=True)


def header(protocol: str, category: str) -> str:
    """What a prompt starts with before its shots: nothing for `leaderboard`."""
    return leaderboard_header(category) if _protocol(protocol) == "leaderboard" else category_header(category)


def render(protocol: str, shot_rows: Sequence[Question], question: Question) -> str:
    """The full prompt of `question` under `protocol` with these shots (`shots_of`)."""
    stripped = _protocol(protocol) == "category"
    done = "".join(f"{_item(s, stripped=stripped)} {OPTION_LETTERS[s.answer]}\n\n" for s in shot_rows)
    return header(protocol, question.subject) + done + _item(question, stripped=stripped)


def continuations(question: Question) -> tuple[str, ...]:
    """What is scored after the prompt: `" A"` … one per option of the question."""
    return tuple(f" {letter}" for letter in OPTION_LETTERS[: len(question.choices)])


def shots_of(protocol: str, data: ProData, category: str, k: int) -> tuple[Question, ...]:
    """The shots of a `category` question: the whole validation split's first k (`leaderboard`), or
    its own category's first k (`category`); `DataError` where there are fewer than k."""
    if _protocol(protocol) == "category":
        return shots(data, category, k)
    if len(data.validation) < k:
        raise DataError(
            f"{data.where}: the validation split has {len(data.validation)} rows, fewer than k={k}"
        )
    return tuple(data.validation[:k])


def _protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise ValueError(f"MMLU-Pro protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    return protocol
