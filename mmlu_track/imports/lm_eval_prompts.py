"""Whether an lm-eval run's prompts are this tool's: each logged context against this tool's rendering
of the same question in each formulation of its benchmark (MMLU's, or MMLU-Pro's for lm-eval's
`leaderboard_mmlu_pro`) and the run's chat style, byte for byte (`protocol_of`);
else lm-eval's own prompts, keyed by the hash of every context.

lm-eval's chat settings are this tool's chat styles (`chat_style`): `--apply_chat_template` is
`multiturn` (`--fewshot_as_multiturn false`: `single_turn`), `--system_instruction` the system text,
and the chat template lm-eval recorded is rendered with transformers' own renderer and the special
tokens it recorded, as `tokenizer.apply_chat_template` renders it: no tokenizer needed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmlu_track.eval import prompts
from mmlu_track.eval.data import DataError, Question
from mmlu_track.imports.lm_eval import LmEvalRun, LmEvalSample
from mmlu_track.records.imported import OWN_PROMPTS
from mmlu_track.settings.config import COT_FORMULATIONS, MMLU_FORMULATIONS, PRO_FORMULATIONS
from mmlu_track.settings.subjects import letters


@dataclass(frozen=True)
class Matched:
    """How an import's questions were asked: one of this tool's formulations in `style`, byte for
    byte (`formulation`), or lm-eval's own prompts (`formulation` None)."""

    protocol: str  # the formulation, or `lm-eval:<hash of every context and continuation>`
    formulation: str | None
    style: prompts.Style
    template_hash: str  # the formulation's in `style` (`prompts.template_hash`), else `protocol`


def chat_style(run: LmEvalRun) -> prompts.Style:
    """The run's prompt style as this tool names it: raw, or its chat settings (`--apply_chat_template`:
    the shots as turns with `--fewshot_as_multiturn`, `--system_instruction` the system text) with the
    chat template lm-eval recorded, rendered with the special tokens it recorded."""
    if run.chat_template is None:
        return prompts.RAW
    from transformers.utils.chat_template_utils import render_jinja_template

    source, tokens = run.chat_template, dict(run.special_tokens)

    def apply(messages: prompts.Messages) -> str:
        # transformers' renderer, as `tokenizer.apply_chat_template` calls it (special tokens as variables)
        render: Any = render_jinja_template
        rendered, _ = render(
            conversations=[list(messages)], chat_template=source, add_generation_prompt=True, **tokens
        )
        return str(rendered[0])

    chat = "multiturn" if run.fewshot_as_multiturn else "single_turn"
    return prompts.Style(chat, run.system_instruction, apply, source)


def _ours(formulation: str, sample: LmEvalSample, shots: tuple[Question, ...], style: prompts.Style) -> bool:
    """Whether `sample` was asked exactly as this tool asks it in `formulation` with `shots`."""
    ours = tuple(f"{style.answer_lead}{c}" for c in letters(len(sample.question.choices)))
    if sample.generated is None and sample.continuations != ours:  # a generation has none
        return False
    return sample.context == prompts.render(
        formulation, sample.question.subject, shots, sample.question, style
    )


ShotsFor = Callable[[str, str], tuple[Question, ...]]  # (formulation, subject) -> the run's shots


def protocol_of(run: LmEvalRun, shots_for: ShotsFor) -> Matched:
    """The formulation of the run's benchmark whose prompt, in the run's chat style (`chat_style`),
    equals every context of `run` byte for byte (`shots_for`: the shots a native run of that
    formulation takes, lm-eval's first n-shot dev rows for MMLU); else
    lm-eval's own prompts, `lm-eval:<hash of its contexts>`, comparable only with imports of the
    same prompts (a chat template that cannot render this tool's messages is lm-eval's own too)."""
    import jinja2

    style = chat_style(run)
    ours = (
        MMLU_FORMULATIONS
        if run.benchmark == "mmlu"
        else COT_FORMULATIONS
        if run.max_gen_toks is not None
        else PRO_FORMULATIONS
    )
    for formulation in ours:
        try:  # a formulation whose shots the data lacks (too few of a category's) is not the run's
            if all(
                _ours(formulation, s, shots_for(formulation, s.question.subject), style) for s in run.samples
            ):
                return Matched(formulation, formulation, style, prompts.template_hash(formulation, style))
        except jinja2.TemplateError:
            break  # the template refuses this tool's messages (a system turn): lm-eval rendered others
        except DataError:
            continue
    digest = hashlib.sha256()
    for s in sorted(run.samples, key=lambda s: (s.question.subject, s.question.index)):
        digest.update(json.dumps([s.question.subject, s.question.index, s.context, s.continuations]).encode())
    own = f"{OWN_PROMPTS}:{digest.hexdigest()[:16]}"
    return Matched(own, None, style, own)
