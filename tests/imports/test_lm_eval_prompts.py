"""imports/lm_eval_prompts.py on real lm-eval 0.4.13 output: raw prompts recognised as this tool's
`harness` formulation, chat settings as its chat styles rendered from the recorded template alone,
and prompts this tool does not make keyed by their hash."""

from __future__ import annotations

import dataclasses

from mmlu_track.eval import prompts
from mmlu_track.imports.lm_eval_prompts import chat_style, protocol_of
from mmlu_track.records.imported import OWN_PROMPTS

from .test_lm_eval import _run, shots_for


def test_raw_and_chat_runs_are_this_tools_protocols_and_others_are_their_own() -> None:
    raw = _run("zero_shot")
    assert chat_style(raw) is prompts.RAW
    assert protocol_of(raw, shots_for(raw)).protocol == "harness"
    chat = _run("chat_single_system")
    style = chat_style(chat)
    assert (style.chat, style.system) == ("single_turn", "Answer with the letter of the right choice.")
    matched = protocol_of(chat, shots_for(chat))
    assert (matched.formulation, matched.template_hash) == (
        "harness",
        prompts.template_hash("harness", style),
    )
    other = dataclasses.replace(
        raw, samples=tuple(dataclasses.replace(s, context=f"Q: {s.context}") for s in raw.samples)
    )
    own = protocol_of(other, shots_for(other))
    assert own.formulation is None
    assert own.protocol.startswith(f"{OWN_PROMPTS}:")
    assert own.template_hash == own.protocol
    assert protocol_of(other, shots_for(other)) == own  # the same prompts: the same key
