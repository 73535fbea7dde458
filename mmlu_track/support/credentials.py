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

Beyond the patterns, secrets are found by parsing and then masked wherever they appear: every
setting that is a URL with a password (`remember_urls`, as the settings are read), an API key and
a Basic credential (`remember_secret`, by the HTTP client) are remembered for the life of the
process, and `redact_text` replaces each of them literally, so a password holding any character
(`' " ? # @ : / %`, a space, percent-encoded or not) is masked in full, and so is a key a server
echoes in its own text. Any `Authorization` value a text holds (Bearer, Basic, Token, any scheme)
and an `X-Api-Key` header's are masked as well, ours or not.

The standard library only, nothing read from the environment.
"""

from __future__ import annotations

import base64
import logging
import re
import urllib.parse
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
# An `Authorization` (or `Proxy-Authorization`) value of any scheme, and an API-key header, in text
# a server sends back (a header echo, an error body): the credential after the scheme's word.
_HEADER_SECRET = re.compile(
    r"(?i)(?P<head>\b(?:(?:proxy-)?authorization|x-api-key|api-key)\\?[\"']?\s*[:=]\s*\\?[\"']?"
    r"(?:[A-Za-z][\w.+-]*\s+(?=[^\s\"']))?)(?P<password>[^\s\"'\\,;&}\]]+)"
)
_STRIP = re.compile(rf"(?P<head>{_SCHEME})(?:[^\s/?#'\"<>\\]|\\\S)*@")


_KNOWN: set[str] = set()  # this process's secrets, found by parsing (see the module's docstring)
_SHORTEST = 4  # a shorter "secret" would mask ordinary text; the patterns above still apply to it


def remember_secret(secret: str | None) -> None:
    """Mask `secret` (and its percent-decoded form) in every text from now on."""
    for value in {secret or "", urllib.parse.unquote(secret or "")}:
        if len(value) >= _SHORTEST:
            _KNOWN.add(value)


def _passwords(text: str) -> list[tuple[str, str]]:
    """(user, password) of each `scheme://user:password@host...` in `text`, found by parsing: a URL
    runs to the next URL's scheme, and its userinfo is all before its last `@`, however its password
    is written (RFC 3986 characters, percent-encoded or not, and the `/ ? # @` and spaces a
    hand-typed one may hold)."""
    starts = list(re.finditer(r"[A-Za-z][A-Za-z0-9+.\-]*://", text))
    found: list[tuple[str, str]] = []
    for here, after in zip(starts, [*starts[1:], None], strict=False):
        rest = text[here.end() : after.start() if after else len(text)]
        user, colon, password = rest.rpartition("@")[0].partition(":")
        if "@" in rest and colon and password:
            found.append((user, password))
    return found


def unencoded_in_password(url: str, chars: str = "/?#") -> bool:
    """Whether a URL's password holds `/`, `?` or `#` as written (a URL parser ends the host part
    there, and would read part of the password as the host or the port); `chars="@/?#"` for a
    parser that also ends the userinfo at its first `@` (SQLAlchemy's)."""
    return any(c in password for _, password in _passwords(url) for c in chars)


def remember_urls(doc: Any) -> None:
    """Remember the password of every URL among the strings of `doc` (a settings document, a list
    of `key=value` overrides), and the Basic credential it makes."""
    if isinstance(doc, dict):
        for value in doc.values():
            remember_urls(value)
    elif isinstance(doc, list | tuple):
        for value in doc:
            remember_urls(value)
    elif isinstance(doc, str):
        for user, password in _passwords(doc):
            remember_secret(password)
            plain = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
            remember_secret(base64.b64encode(plain.encode()).decode())
        for key, value in urllib.parse.parse_qsl(doc.partition("?")[2]):
            if key.lower() in ("password", "passwd", "pwd"):
                remember_secret(value)


# A setting's last name that says it holds a secret (none of the tool's own does: `api_key_env`
# holds a variable's name), matched whole: `max_new_tokens` is not one.
SECRET_NAME = re.compile(r"(api_?)?key|\w*_?(token|secret|password|passwd)|auth\w*|credentials?")


def remember_overrides(overrides: list[str]) -> None:
    """Every URL's password in a command's `key=value` overrides, and the value given to a key-like
    setting (a typo such as `+model.api_key=`), masked from now on: before Hydra parses them (its
    grammar errors print an override as typed)."""
    remember_urls(overrides)
    for override in overrides:
        key, _, value = override.partition("=")
        if SECRET_NAME.fullmatch(key.rsplit(".", 1)[-1].lstrip("+~").lower()):
            remember_secret(value)


def _mask(match: re.Match[str]) -> str:
    return f"{match['head']}{MASK}" + ("@" if match.re is _USERINFO else "")


def redact_text(text: str) -> str:
    """`text` with the password of every URL in it (and every `password=` value), and every secret
    this process knows, as `***`."""
    for secret in sorted(_KNOWN, key=len, reverse=True):  # a longer one before any part of it
        text = text.replace(secret, MASK)
    return _HEADER_SECRET.sub(_mask, _PASSWORD_PARAM.sub(_mask, _USERINFO.sub(_mask, text)))


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
    """Whether this URL holds a `***` where its password was (as stored configs and hints do)."""
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
        """Mask passwords in `record`'s message (in place); always True: no record is dropped."""
        message = record.getMessage()
        if (clean := redact_text(message)) != message:
            record.msg, record.args = clean, ()
        return True
