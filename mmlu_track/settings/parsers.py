"""Config values that are not one scalar: parsed and checked where `typed.from_mapping` meets the
field of that name (`PARSERS`), each bad value one `ConfigError` line."""

from __future__ import annotations

import re
from typing import Any

from mmlu_track.settings.subjects import PRO_CATEGORIES, SUBJECTS
from mmlu_track.settings.typed import ConfigError, suggest


def parse_subjects(value: Any) -> tuple[str, ...]:
    """`all`, one subject name, or a list of names -> a tuple of known subjects in given order (an
    MMLU subject or an MMLU-Pro category: which the benchmark allows is checked with the benchmark,
    `checks.subjects_of`); `all` is MMLU's 57 until then."""
    if value == "all":
        return SUBJECTS
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not names:
        raise ConfigError(f"subjects must be 'all' or a non-empty list of subjects, got {value!r}")
    known = (*SUBJECTS, *PRO_CATEGORIES)
    seen: list[str] = []
    for name in names:
        if name not in known:
            raise ConfigError(
                f"unknown subject {name!r}{suggest(str(name), known)}; allowed: 'all', any of the 57 MMLU "
                f"subjects ({SUBJECTS[0]}, {SUBJECTS[1]}, ...) or, with benchmark=mmlu_pro, its 14 categories"
            )
        if name not in seen:
            seen.append(name)
    return tuple(seen)


def parse_patterns(value: Any) -> tuple[str, ...]:
    """A non-empty list of regular expressions, each with exactly one group (the letter)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ConfigError(f"scoring.patterns must be a non-empty list of regular expressions, got {value!r}")
    for item in items:
        if not isinstance(item, str) or not item:
            raise ConfigError(f"scoring.patterns: {item!r} is not a regular expression (a non-empty string)")
        try:
            groups = re.compile(item).groups
        except re.error as err:
            raise ConfigError(f"scoring.patterns: {item!r} is not a regular expression: {err}") from None
        if groups != 1:
            raise ConfigError(
                f"scoring.patterns: {item!r} must have exactly one group, the letter (has {groups})"
            )
    return tuple(items)


# `all` and subject names, checked, in the order given; answer patterns, compiled once to check them
PARSERS = {"subjects": parse_subjects, "patterns": parse_patterns}
