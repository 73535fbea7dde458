"""A tokenizer's own chat template, as both backends use it: its source text (hashed into the
run's template hash) and chat messages rendered by it with the generation prompt
(`tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`).

A template that refuses a system role (it raises a Jinja error for one) gets the system text at
the start of the first user message instead (`prompts.fold_system`; lm-eval drops it, and with it
the subject's header). `render` returns the messages it rendered too: a served model's
`/v1/chat/completions` is sent exactly those, so the server's template sees what ours did.

Duck-typed over a transformers tokenizer: no transformers import here.
"""

from __future__ import annotations

from typing import Any

from mmlu_track.eval.prompts import Messages, fold_system


def source(tokenizer: Any) -> str | None:
    """The tokenizer's chat template (its Jinja source), None when it has none."""
    template = getattr(tokenizer, "chat_template", None)
    return template if isinstance(template, str) and template.strip() else None


def render(tokenizer: Any, messages: Messages) -> tuple[str, Messages]:
    """(the messages as the template renders them with its generation prompt, the messages rendered:
    `messages`, or them with the system message folded into the first user message)."""
    import jinja2

    def rendered(msgs: Messages) -> str:
        text: str = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return text

    try:
        return rendered(messages), messages
    except jinja2.TemplateError:
        if messages[0]["role"] != "system":
            raise
        folded = fold_system(messages)
        return rendered(folded), folded
