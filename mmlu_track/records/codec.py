"""The one mechanism that turns the typed records into JSON documents and back, checked by type.

- `dump(record)`: a dataclass record's fields as plain values, in field order (nested records as
  dicts, tuples as tuples): exactly what `dataclasses.asdict` gives, serialized by its type's adapter.
- `load(cls, doc, what)`: a parsed JSON document as a `cls`, each value checked against its field's
  type as JSON strict mode checks it: an `int` field takes only an integer (no "3", no 3.0, no
  true), a `float` field an integer or a number, a `str` field only a string, a tuple an array of
  its length, a `dict[int, ...]` the string keys JSON writes ("5"); a field with a default may be
  absent. What does not match is one `RecordError` line naming the field's dotted path:
  `unreadable run record: scores.micro.n: Input should be a valid integer`.
- `closed`: a record whose document may carry no other key (an unknown one is refused by name);
  keys a record does not know are otherwise ignored (derived values such as `correct`).
- `RecordError`: what every typed record raises when a stored one cannot be read (also importable
  from `records.protocol`, where it was first defined).

Pydantic (`TypeAdapter`, one per record class, built once: building costs milliseconds) does the
work; it is imported when a record is first dumped or loaded, not when the records are imported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from mmlu_track.support.errors import MmluTrackError

if TYPE_CHECKING:
    from pydantic import TypeAdapter

R = TypeVar("R")


class RecordError(MmluTrackError):
    """A stored record this version cannot read (written by an incompatible mmlu_track)."""


def closed(cls: type[R]) -> type[R]:
    """Mark the dataclass `cls` so that `load` refuses a document with a key it has no field for."""
    cls.__pydantic_config__ = {"extra": "forbid"}  # type: ignore[attr-defined]  # pydantic's ConfigDict
    return cls


class _Codec:
    """One record class's validator and serializer (pydantic's, built once: a `TypeAdapter` costs
    milliseconds) and the bound calls `load` and `dump` make on every record."""

    __slots__ = ("parse", "parse_python", "to_json", "to_python")

    def __init__(self, cls: type) -> None:
        """Build `cls`'s adapter; pydantic is imported here, on the first record dumped or loaded."""
        from pydantic import TypeAdapter

        adapter: TypeAdapter[Any] = TypeAdapter(cls)
        self.parse: Callable[..., Any] = adapter.validator.validate_json
        self.parse_python: Callable[[Any], Any] = adapter.validator.validate_python
        self.to_python: Callable[[Any], Any] = adapter.serializer.to_python
        self.to_json = _json_text()


@functools.cache
def _json_text() -> Callable[[Any], bytes]:
    """Any document as JSON text (NaN and infinities as Python's json module writes them)."""
    from pydantic import ConfigDict, TypeAdapter

    return TypeAdapter(Any, config=ConfigDict(ser_json_inf_nan="constants")).serializer.to_json


_CODECS: dict[type, _Codec] = {}  # by record class


def _codec(cls: type) -> _Codec:
    found = _CODECS.get(cls)
    if found is None:
        found = _CODECS[cls] = _Codec(cls)
    return found


def dump(record: object) -> dict[str, Any]:
    """The dataclass `record`'s fields as a JSON-ready dict of plain values, in field order (nested
    records as dicts, tuples kept): the same dict as `dataclasses.asdict`. A value that is not its
    field's type is written as it is, with pydantic's warning."""
    out: dict[str, Any] = _codec(type(record)).to_python(record)
    return out


def load(cls: type[R], doc: object, what: str) -> R:
    """`doc`, a parsed JSON document, as the record `cls`, every value checked against its field's
    type (JSON strict mode, see the module's docstring); `RecordError` in one line, `unreadable
    {what}: {the first failing field's dotted path}: {what was wrong}` (and how many more failed)."""
    codec = _codec(cls)
    try:
        try:
            # Checked as the JSON text it came from (strict JSON takes arrays as tuples, string keys
            # as int keys); NaN and infinities pass as Python's json module writes and reads them.
            text = codec.to_json(doc)
        except ValueError:
            # A string UTF-8 cannot hold (a lone surrogate: argv's undecodable bytes, which Python's
            # json writes and reads): the types checked on a copy without it, the values kept.
            codec.parse(codec.to_json(_encodable(doc)), strict=True)
            found: R = codec.parse_python(doc)  # lax, but the copy passed strict: the same values
        else:
            found = codec.parse(text, strict=True)
    except ValueError as err:  # pydantic's ValidationError, or PydanticSerializationError: not JSON
        raise RecordError(f"unreadable {what}: {_why(err)}") from err
    return found


def _encodable(value: object) -> object:
    """`value` with each string's lone surrogates replaced by "?" (lists for tuples)."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(v) for v in value]
    return value


def _why(err: ValueError) -> str:
    """A validation error's first failure as `path: message` and how many more there are; another
    error (a value JSON cannot hold) as its message."""
    errors = getattr(err, "errors", None)
    if errors is None:
        return f"not a JSON document ({err})"
    found: list[dict[str, Any]] = errors(include_url=False, include_context=False, include_input=False)
    path = ".".join(str(part) for part in found[0]["loc"])
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{path + ': ' if path else ''}{found[0]['msg']}{more}"
