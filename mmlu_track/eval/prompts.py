"""Prompt formulations as pure functions over `Question` records (prompts are versioned data).

Every formulation ends a prompt with `Answer:` and no trailing space: the answer letter is a
continuation that carries its own leading space (`" A"`), as in the original evaluation and
lm-eval-harness. Shots end with `" X\\n\\n"`.

- `original`: hendrycks/test evaluate.py. Its subject formatting leaves a double space after
  "about" (`about  abstract algebra`); questions and choices are used as stored.
- `harness`: lm-eval-harness `mmlu`: single space, `question.strip()`, shots joined by "\\n\\n".
- `question`: the HELM / lighteval `Question:` style with a subject-free header.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mmlu_track.eval.data import Question
from mmlu_track.records.subjects import LETTERS, pretty


def _choices(q: Question) -> str:
    return "".join(f"\n{letter}. {choice}" for letter, choice in zip(LETTERS, q.choices, strict=True))


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


@dataclass(frozen=True)
class Formulation:
    name: str
    header: Callable[[str], str]
    body: Callable[[Question], str]


FORMULATIONS: dict[str, Formulation] = {
    "original": Formulation("original", _original_header, _original_body),
    "harness": Formulation("harness", _harness_header, _harness_body),
    "question": Formulation("question", _question_header, _question_body),
}


def shared_prefix(formulation: str, subject: str, shots: Sequence[Question]) -> str:
    """What every prompt of a subject with these shots starts with: the header and the shots."""
    fmt = FORMULATIONS[formulation]
    return fmt.header(subject) + "".join(f"{fmt.body(s)} {LETTERS[s.answer]}\n\n" for s in shots)


def render(formulation: str, subject: str, shots: Sequence[Question], question: Question) -> str:
    """The full prompt: header, each shot with its answer (`" X\\n\\n"`), then the question."""
    return shared_prefix(formulation, subject, shots) + FORMULATIONS[formulation].body(question)


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

    @property
    def sha(self) -> str:
        return text_hash(self.text)


def fit(
    formulation: str,
    shots: Sequence[Question],
    question: Question,
    fits: Callable[[str], bool],
) -> Prompt:
    """Drop shots from the end, one at a time, until `fits(text)` (as the original does).

    At zero shots the prompt is returned even if it does not fit; the scorer then keeps its
    last tokens and records the truncation.
    """
    for used in range(len(shots), -1, -1):
        prefix = shared_prefix(formulation, question.subject, shots[:used])
        text = prefix + FORMULATIONS[formulation].body(question)
        if used == 0 or fits(text):
            return Prompt(question, text, used, prefix)
    raise AssertionError("unreachable")


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_PROBE_SHOT = Question("high_school_biology", "dev", 0, " Shot question? ", ("a", "b", "c", "d"), 2)
_PROBE = Question("high_school_biology", "test", 0, " Test question?\n", ("w", "x", "y", "z"), 0)


def template_hash(formulation: str) -> str:
    """A hash of what the formulation renders on a fixed probe: changes whenever the template does."""
    probe = render(formulation, _PROBE.subject, [_PROBE_SHOT], _PROBE)
    return text_hash(f"{formulation}\x00{probe}")
