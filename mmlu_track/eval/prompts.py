r"""Prompt formulations as pure functions over `Question` records (prompts are versioned data).

Every formulation ends a prompt with `Answer:` and no trailing space: the answer letter is a
continuation that carries its own leading space (`" A"`), as in the original evaluation and
lm-eval-harness. Shots end with `" X\n\n"`.

- `original`: hendrycks/test evaluate.py. Its subject formatting leaves a double space after
  "about" (`about  abstract algebra`); questions and choices are used as stored.
- `harness`: lm-eval-harness `mmlu`: single space, `question.strip()`, shots joined by "\n\n".
- `question`: the HELM / lighteval `Question:` style with a subject-free header.
- `leaderboard`, `category` (MMLU-Pro, `benchmark=mmlu_pro`): lm-eval's `leaderboard_mmlu_pro` and
  the category protocol the docs recommend for a gate (`prompts_pro`), A-J for up to 10 options;
  `cot_official`, `cot_lm_eval`: its chain-of-thought protocol, generated (`prompts_cot`).

Chat prompts (`ChatConfig`; the rule is lm-evaluation-harness 0.4.13's `fewshot_context` with
`--apply_chat_template`): `messages` puts the formulation's header (after `system`, if any, and
"\n\n") in a system message; `single_turn` puts the shots, each ending `" X\n\n"`, and the
question into one user message, `multiturn` makes each shot a user turn (its body) and an
assistant turn (its letter). The model's own chat template renders them with its generation
prompt (`Style.template`), and the answer is the letter itself (`"A"`: `Style.answer_lead` is
empty), as lm-eval scores it. A chat prompt's shared prefix is where two probe questions'
renderings part: the template's text up to the question's own content.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mmlu_track.eval import prompts_cot, prompts_pro
from mmlu_track.eval.data import Question
from mmlu_track.settings.subjects import LETTERS, letters, pretty


def _choices(q: Question) -> str:
    return "".join(
        f"\n{letter}. {choice}" for letter, choice in zip(letters(len(q.choices)), q.choices, strict=True)
    )


def _original_header(subject: str) -> str:
    # The original builds " " + word for each word, after "about " -> a double space.
    words = "".join(" " + w for w in subject.split("_"))
    return f"The following are multiple choice questions (with answers) about {words}.\n\n"


def _original_body(q: Question) -> str:
    return f"{q.question}{_choices(q)}\nAnswer:"


def _harness_header(subject: str) -> str:
    return f"The following are multiple choice questions (with answers) about {pretty(subject)}.\n\n"


def _harness_body(q: Question) -> str:
    return f"{q.question.strip()}{_choices(q)}\nAnswer:"


def _question_header(subject: str) -> str:
    return "The following are multiple choice questions (with answers).\n\n"


def _question_body(q: Question) -> str:
    return f"Question: {q.question.strip()}{_choices(q)}\nAnswer:"


def _letter(q: Question) -> str:
    return LETTERS[q.answer]


@dataclass(frozen=True)
class Formulation:
    r"""One named prompt formulation: `header(subject)` opens every prompt, `body(question)` renders a
    question (shot or asked) up to its closing `Answer:`; `answer(shot)` is what a shot's answer is
    (its letter; a chain-of-thought shot's reasoning: the chat assistant turn); `shot(shot)` a whole
    raw shot (None: its body, `" "`, its answer, `"\n\n"`)."""

    name: str
    header: Callable[[str], str]
    body: Callable[[Question], str]
    answer: Callable[[Question], str] = _letter
    shot: Callable[[Question], str] | None = None

    def shot_text(self, shot: Question) -> str:
        r"""One worked example as a raw prompt shows it, ending `"\n\n"`."""
        return self.shot(shot) if self.shot is not None else f"{self.body(shot)} {self.answer(shot)}\n\n"


FORMULATIONS: dict[str, Formulation] = {
    "original": Formulation("original", _original_header, _original_body),
    "harness": Formulation("harness", _harness_header, _harness_body),
    "question": Formulation("question", _question_header, _question_body),
    # lm-eval's leaderboard_mmlu_pro asks as the original does, options as published, with no header
    "leaderboard": Formulation("leaderboard", prompts_pro.leaderboard_header, _original_body),
    "category": Formulation("category", prompts_pro.category_header, prompts_pro.category_body),
    "cot_official": Formulation(
        "cot_official", prompts_cot.official_header, prompts_cot.official_body, prompts_cot.reasoning,
        prompts_cot.official_shot,
    ),
    "cot_lm_eval": Formulation(
        "cot_lm_eval", prompts_cot.lm_eval_header, prompts_cot.lm_eval_body, prompts_cot.reasoning,
        prompts_cot.lm_eval_shot,
    ),
}  # fmt: skip


Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Style:
    """How prompts are put to the model: raw text (`chat="none"`), or chat messages rendered by
    `template` (the model's chat template, generation prompt added). `template_text` is that
    template's source, hashed into the run's template hash."""

    chat: str = "none"
    system: str | None = None
    template: Callable[[Messages], str] | None = field(default=None, compare=False)
    template_text: str | None = None
    # Each (formulation, subject, shots)'s shared prefix, rendered once for this style's template.
    prefixes: dict[tuple[str, str, tuple[Question, ...]], str] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def answer_lead(self) -> str:
        """What precedes the answer letter: `" "` after a raw `Answer:`, nothing at the start of an
        assistant turn."""
        return " " if self.chat == "none" else ""


RAW = Style()


def _shots_text(fmt: Formulation, shots: Sequence[Question]) -> str:
    return "".join(fmt.shot_text(s) for s in shots)


def shared_prefix(formulation: str, subject: str, shots: Sequence[Question]) -> str:
    """What every raw prompt of a subject with these shots starts with: the header and the shots."""
    fmt = FORMULATIONS[formulation]
    return fmt.header(subject) + _shots_text(fmt, shots)


def _delimited(first: str | None, second: str, delimiter: str = "\n\n") -> str:
    # lm-eval's maybe_delimit: the delimiter only where neither side has whitespace at the join.
    if not first:
        return second
    return first + delimiter + second if not (first[-1].isspace() or second[:1].isspace()) else first + second


def messages(
    formulation: str,
    subject: str,
    shots: Sequence[Question],
    question: Question,
    *,
    chat: str,
    system: str | None,
) -> Messages:
    """The chat messages of a prompt (`chat` is `single_turn` or `multiturn`)."""
    fmt = FORMULATIONS[formulation]
    out = [{"role": "system", "content": _delimited(system, fmt.header(subject))}]
    if chat == "multiturn":
        for s in shots:
            out += [
                {"role": "user", "content": fmt.body(s)},
                {"role": "assistant", "content": fmt.answer(s)},
            ]
        return [*out, {"role": "user", "content": fmt.body(question)}]
    if chat == "single_turn":
        return [*out, {"role": "user", "content": _shots_text(fmt, shots) + fmt.body(question)}]
    raise ValueError(f"chat={chat!r} has no messages: single_turn or multiturn")


def fold_system(msgs: Messages) -> Messages:
    """For a template without a system role: the system text opens the first user message."""
    system, first, *rest = msgs
    return [{"role": "user", "content": _delimited(system["content"], first["content"])}, *rest]


def render(
    formulation: str, subject: str, shots: Sequence[Question], question: Question, style: Style = RAW
) -> str:
    r"""The full prompt: raw, the header, each shot with its answer (`" X\n\n"`), then the
    question; chat, the messages as the model's template renders them."""
    if style.chat == "none":
        return shared_prefix(formulation, subject, shots) + FORMULATIONS[formulation].body(question)
    return _rendered(formulation, subject, shots, question, style)[0]


def _rendered(
    formulation: str, subject: str, shots: Sequence[Question], question: Question, style: Style
) -> tuple[str, Messages]:
    if style.template is None:
        raise ValueError(f"chat={style.chat} needs the model's chat template")
    msgs = messages(formulation, subject, shots, question, chat=style.chat, system=style.system)
    return style.template(msgs), msgs


# Two questions whose renderings part at their first character: what precedes it is shared.
_PART_A = Question("high_school_biology", "test", 0, "A?", ("a", "b", "c", "d"), 0)
_PART_B = Question("high_school_biology", "test", 0, "B?", ("a", "b", "c", "d"), 0)


def _chat_prefix(formulation: str, subject: str, shots: tuple[Question, ...], style: Style) -> str:
    key = (formulation, subject, shots)
    if key not in style.prefixes:
        a, b = (render(formulation, subject, shots, q, style) for q in (_PART_A, _PART_B))
        parted = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        style.prefixes[key] = a[:parted]
    return style.prefixes[key]


def prompt_prefix(formulation: str, subject: str, shots: Sequence[Question], style: Style = RAW) -> str:
    """What every prompt of a subject with these shots starts with (header and shots, as rendered)."""
    if style.chat == "none":
        return shared_prefix(formulation, subject, shots)
    return _chat_prefix(formulation, subject, tuple(shots), style)


def select_shots(dev: Sequence[Question], k: int, how: str, seed: int) -> tuple[Question, ...]:
    """`first`: the first k dev rows (the original and the harness); `random`: a seeded sample."""
    if k > len(dev):
        raise ValueError(f"k={k} but {dev[0].subject if dev else '?'} has {len(dev)} dev examples")
    if how == "first":
        return tuple(dev[:k])
    rng = random.Random(f"{seed}:shots:{dev[0].subject if dev else ''}")
    return tuple(rng.sample(list(dev), k))


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt for one test question; `shots_used` may be below k (context fitting)."""

    question: Question
    text: str
    shots_used: int
    prefix: str  # `shared_prefix` of the shots used: the same for a subject's questions
    messages: Messages | None = field(default=None, compare=False)  # what a chat prompt's text renders

    @property
    def sha(self) -> str:
        """The prompt text's `text_hash` (16 hex characters)."""
        return text_hash(self.text)


def fit(
    formulation: str,
    shots: Sequence[Question],
    question: Question,
    fits: Callable[[str], bool],
    style: Style = RAW,
) -> Prompt:
    """Drop shots from the end, one at a time, until `fits(text)` (as the original does).

    At zero shots the prompt is returned even if it does not fit; the scorer then keeps its
    last tokens and records the truncation. A chat prompt a template renders without its shared
    prefix in front (never seen) is its own prefix: the prefix cache then scores it whole.
    """
    for used in range(len(shots), -1, -1):
        prefix = prompt_prefix(formulation, question.subject, shots[:used], style)
        msgs = None
        if style.chat == "none":  # a raw prompt is its prefix and the question: built once
            text = prefix + FORMULATIONS[formulation].body(question)
        else:
            text, msgs = _rendered(formulation, question.subject, shots[:used], question, style)
        if used == 0 or fits(text):
            return Prompt(question, text, used, prefix if text.startswith(prefix) else text, msgs)
    raise AssertionError("unreachable")


def rotations_of(q: Question) -> int:
    """How many cyclic rotations a circular run asks of a question: one per choice (rotation 0: as
    given), so 4 for MMLU and up to 10 for MMLU-Pro."""
    return len(q.choices)


def rotate(q: Question, r: int) -> Question:
    """The question with its n choices turned `r` places (rotation 1 of four shows BCDA): choice i
    stands under letter (i - r) % n, and the gold letter moves with its text."""
    c, n = q.choices, len(q.choices)
    turned = tuple(c[(r + i) % n] for i in range(n))
    return dataclasses.replace(q, choices=turned, answer=(q.answer - r) % n)


def rotated(
    prompt: Prompt, r: int, formulation: str, shots: Sequence[Question], style: Style = RAW
) -> Prompt:
    """`prompt` asked in rotation `r`: the same shots (the few-shot prefix shared with rotation
    0), the question's choices turned."""
    q = rotate(prompt.question, r)
    if style.chat == "none":  # a raw prompt is its prefix and the question
        return Prompt(q, prompt.prefix + FORMULATIONS[formulation].body(q), prompt.shots_used, prompt.prefix)
    text, msgs = _rendered(formulation, q.subject, shots[: prompt.shots_used], q, style)
    return Prompt(q, text, prompt.shots_used, prompt.prefix if text.startswith(prompt.prefix) else text, msgs)


def text_hash(text: str) -> str:
    """The first 16 hex characters of the sha256 of `text` (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_PROBE_SHOT = Question(
    "high_school_biology", "dev", 0, " Shot question? ", ("a", "b", "c", "d"), 2,
    cot="A: Let's think step by step. Probe. The answer is (C).",  # only a chain of thought shows it
)  # fmt: skip
_PROBE = Question("high_school_biology", "test", 0, " Test question?\n", ("w", "x", "y", "z"), 0)


def template_hash(formulation: str, style: Style = RAW) -> str:
    """A hash of what the formulation renders on a fixed probe: changes whenever the template does.
    A chat style adds itself, the system message and the chat template's source (a raw prompt's
    hash is what it was before chat prompts)."""
    probe = render(formulation, _PROBE.subject, [_PROBE_SHOT], _PROBE, style)
    if style.chat == "none":
        return text_hash(f"{formulation}\x00{probe}")
    return text_hash(f"{formulation}\x00{style.chat}\x00{style.system}\x00{style.template_text}\x00{probe}")
