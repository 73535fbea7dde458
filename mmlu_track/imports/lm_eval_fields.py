"""What an lm-eval results file records beside its scores, read as this tool keeps it: the model's
arguments, `--limit`, the seeds, the date, the chat fields and the tokenizer's special tokens. Each
reader takes what lm-eval wrote and returns a plain value, or refuses it in one line (`DataError`)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mmlu_track.eval.data import DataError

Key = tuple[str, tuple[str, ...]]  # a question's text and its choices, whitespace collapsed


def key(question: str, choices: Iterable[str]) -> Key:
    """A question as matched: its text and choices with their whitespace collapsed."""

    def collapse(text: str) -> str:
        return re.sub(r"\s+", " ", text).strip()

    return collapse(question), tuple(collapse(c) for c in choices)


def text(doc: Mapping[str, Any], key: str) -> str | None:
    """A text field lm-eval records (null, or absent, when unused): anything else is not used."""
    value = doc.get(key)
    return value if isinstance(value, str) and value else None


def model_args(raw: object) -> dict[str, str]:
    """`model_args` as a mapping: lm-eval records a dict, or the string it was given (`k=v,k=v`)."""
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    if isinstance(raw, str):
        return {k.strip(): v.strip() for k, _, v in (p.partition("=") for p in raw.split(",")) if k.strip()}
    return {}


def limit(raw: object, path: Path) -> float | None:
    """lm-eval's `--limit` (a count, or a fraction of each task), or None."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw <= 0:
        raise DataError(f"{path}: config.limit {raw!r} is not a number of questions")
    return float(raw)


SEEDS = ("random", "numpy", "torch", "fewshot")  # lm-eval's `--seed` (config.<name>_seed)


def date(raw: object) -> str | None:
    """lm-eval's `date` (a Unix time) as UTC ISO 8601; None when absent or not a time."""
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        return None
    from datetime import UTC, datetime

    try:
        return datetime.fromtimestamp(raw, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # NaN, or beyond the calendar
        return None


def special_tokens(doc: Mapping[str, Any]) -> dict[str, str]:
    """The tokenizer's special tokens as lm-eval recorded them (`tokenizer_bos_token`: [text, id])."""
    out = {}
    for name in ("bos_token", "eos_token", "pad_token"):
        said = doc.get(f"tokenizer_{name}")
        if isinstance(said, list) and said and isinstance(said[0], str):
            out[name] = said[0]
    return out


def generation_kwargs(configs: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """A generated run's `max_gen_toks` and stop strings (`until`), the same for every task (each
    task's `generation_kwargs`, as lm-eval ran it: `--gen_kwargs` included); {} for a run of
    log-likelihoods."""
    found = {
        (kw.get("max_gen_toks"), tuple(kw.get("until") or ()))
        for config in configs.values()
        if isinstance(config, dict)
        and config.get("output_type") == "generate_until"
        and isinstance(kw := config.get("generation_kwargs"), dict)
    }
    if not found:
        return {}
    if len(found) > 1:
        raise DataError(
            f"{path}: its tasks generated with different max_gen_toks or until: import them apart"
        )
    ((limit, until),) = found
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or limit < 1
        or not all(isinstance(u, str) for u in until)
    ):
        raise DataError(f"{path}: generation_kwargs max_gen_toks {limit!r} / until {until!r} cannot be read")
    return {"max_gen_toks": limit, "until": until}
