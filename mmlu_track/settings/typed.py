"""Plain values (a resolved config, a stored run's settings) -> typed, frozen dataclasses: each
value is checked against its field's type hint, and a bad one raises `ConfigError` in one line
saying what is wrong and what is allowed. Generic: what the settings are lives in `config.py`."""

from __future__ import annotations

import dataclasses
import difflib
import types
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from mmlu_track.support.errors import MmluTrackError

Parsers = Mapping[str, Callable[[Any], Any]]


class ConfigError(MmluTrackError):
    """A configuration value is missing, unknown or impossible. The message is one line."""

    before_any_work = True  # raised while the run is planned, before anything is recorded


def suggest(value: str, allowed: tuple[str, ...]) -> str:
    """A hint to append to an error: ` (did you mean x, y?)` naming up to 3 close matches among
    `allowed`, or "" when none is close."""
    close = difflib.get_close_matches(value, allowed, n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _convert(value: Any, hint: Any, key: str, parsers: Parsers) -> Any:
    """Check `value` against a type hint of the dataclasses above and return it converted."""
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        options = get_args(hint)
        if value is None:
            if type(None) in options:
                return None
            raise ConfigError(f"{key} is required (got null)")
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, key, parsers)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0])
    if origin is Literal:
        allowed = tuple(str(a) for a in get_args(hint))
        if value not in allowed:
            raise ConfigError(
                f"{key}={value!r} is not allowed{suggest(str(value), allowed)}; "
                f"choose one of: {', '.join(allowed)}"
            )
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key} must be a mapping, got {value!r}")
        return from_mapping(hint, value, f"{key}.", parsers)  # type: ignore[arg-type]
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
        return value
    if origin is tuple and get_args(hint)[1:] == (Ellipsis,):  # tuple[X, ...]: a list of X
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise ConfigError(f"{key} must be a list, e.g. {key}=[1,2,3], got {value!r}")
        return tuple(_convert(v, get_args(hint)[0], f"{key}[{i}]", parsers) for i, v in enumerate(value))
    raise TypeError(f"unsupported config type {hint!r} for {key}")  # a bug here, not user input


def from_mapping(
    cls: type[Any], mapping: Mapping[str, Any], prefix: str = "", parsers: Parsers = MappingProxyType({})
) -> Any:
    """`mapping` as a `cls`, each value checked against its type hint (nested dataclasses too);
    `parsers` convert the fields they name instead."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(mapping) - names)
    if unknown:
        raise ConfigError(
            f"unknown key {prefix}{unknown[0]}{suggest(unknown[0], tuple(names))}; "
            f"known keys: {', '.join(sorted(names))}"
        )
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        key = f"{prefix}{field.name}"
        if field.name not in mapping:
            has_default = (
                field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            )
            if not has_default:
                raise ConfigError(f"{key} is required")
            continue
        if parse := parsers.get(field.name):
            kwargs[field.name] = parse(mapping[field.name])
            continue
        kwargs[field.name] = _convert(mapping[field.name], hints[field.name], key, parsers)
    return cls(**kwargs)


def flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, object]:
    """Nested mappings as one level of dotted keys: {"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict[str, object] = {}
    for key, value in doc.items():
        if isinstance(value, Mapping):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out
