"""Secrets in URLs never leave the process: what to print, store or report instead of a URL.

`redact(url)` replaces the password of a `scheme://user:password@host...` URL (SQLAlchemy's
`postgresql+psycopg://`, http(s), any scheme) with `***`, keeping the user, and the value of a
`password=` query parameter (which psycopg accepts) likewise; a URL without a password comes back
unchanged, and redacting twice changes nothing. `redact_text` does the same for every URL inside a
longer text (an error message, a YAML file), `redact_doc` for every string of a document (a
config as stored). `strip_userinfo` drops `user:password@` altogether
(for links a browser opens, and requests whose credentials travel apart from the URL).
`refill` finds, among URLs this process knows, the one a stored (redacted) URL stood for;
`RedactingFilter` masks log records.

Pure: the standard library only, nothing read from the environment.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

MASK = "***"

# userinfo = user ":" password "@", before the host. The password runs to the last "@" before the
# path (an unencoded "@" in a password is then masked too, never half-shown); it stops at
# whitespace and at the quotes a URL is written between in YAML, JSON or a message. A backslash
# may escape any character: Hydra writes a sweep job's overrides so (`http\://u\:pw@h\:5000`), and
# a failed job's overrides as a Python list, its backslashes doubled (`http\\://u\\:pw@h`).
_SCHEME = r"\b[A-Za-z][A-Za-z0-9+.\-]*(?:\\{1,2})?://"
_USERINFO = re.compile(
    rf"(?P<head>{_SCHEME}(?:[^\s:/?#@'\"<>\\]|\\{{1,2}}[^:\s\\])*(?:\\{{1,2}})?:)"
    r"(?P<password>(?:[^\s/'\"<>\\]|\\{1,2}[^\s\\])+)@"
)
# `?password=...`, `&password=...` (psycopg's connection parameters), and a DSN's `password=...`.
_PASSWORD_PARAM = re.compile(
    r"(?i)(?P<head>(?<![A-Za-z0-9])(?:password|passwd|pwd)\\?=)(?P<password>(?:[^\s&;'\"<>\\]|\\\S)+)"
)
_STRIP = re.compile(rf"(?P<head>{_SCHEME})(?:[^\s/?#'\"<>\\]|\\\S)*@")


def _mask(match: re.Match[str]) -> str:
    return f"{match['head']}{MASK}" + ("@" if match.re is _USERINFO else "")


def redact_text(text: str) -> str:
    """`text` with the password of every URL in it (and every `password=` value) as `***`."""
    return _PASSWORD_PARAM.sub(_mask, _USERINFO.sub(_mask, text))


def redact_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """A JSON-like document with `redact_text` applied to every string in it, however nested."""

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return redact_text(value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(clean(v) for v in value)
        return value

    return {k: clean(v) for k, v in doc.items()}


def redact(url: str) -> str:
    """One URL with its password as `***` (the user kept); unchanged when it has none."""
    return redact_text(url)


def strip_userinfo(url: str) -> str:
    """The URL without `user:password@` (and with any `password=` value masked)."""
    return redact_text(_STRIP.sub(lambda m: m["head"], url))


def is_redacted(url: str) -> bool:
    """Does this URL hold a `***` where its password was (as stored configs and hints do)?"""
    return f":{MASK}@" in url or bool(re.search(rf"(?i)(?:password|passwd|pwd)={re.escape(MASK)}", url))


def refill(stored: str, known: Iterable[str | None]) -> str | None:
    """The URL among `known` that `stored` (redacted) stands for: same everything but the password;
    None when none is."""
    for url in known:
        if url and redact(url) == stored:
            return url
    return None


class RedactingFilter(logging.Filter):
    """Masks passwords in every log record: Hydra's launcher logs each sweep job's overrides, and
    the run's log file keeps what its libraries say (`conf/eval.yaml` puts it on both)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if (clean := redact_text(message)) != message:
            record.msg, record.args = clean, ()
        return True
