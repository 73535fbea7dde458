"""What the package tells its user beside its results: one warning line on stderr.

`warn(message)` prints `mmlu_track: warning: <message>` to stderr, the message as given (a caller
that names a URL redacts it first: `credentials.redact`). `reader_gone()`: what a command does
when its output's reader has closed (`... | head`). `redacted_stderr()`: stderr with every secret
the command names masked (Hydra prints overrides as typed). The standard library and
`credentials` only, so any layer may use it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def warn(message: str) -> None:
    """One warning on stderr, apart from the results on stdout."""
    print(f"mmlu_track: warning: {message}", file=sys.stderr)


def reader_gone(code: int) -> int:
    """The standard output's reader closed early (`runs list | head`): the rest of the output goes nowhere and
    the command ends with `code`, not a BrokenPipeError traceback (Python's documented recipe:
    stdout pointed at devnull so the interpreter's last flush cannot fail again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return code


class _RedactedStream:
    def __init__(self, stream: Any) -> None:
        from mmlu_track.support.credentials import redact_text

        self._stream, self._redact = stream, redact_text

    def write(self, text: str) -> int:
        return int(self._stream.write(self._redact(text)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def redacted_stderr() -> Iterator[None]:
    """Hydra's driver writes a failed sweep job's overrides to stderr as given, a URL's password
    with them, and its grammar errors an override as typed: written without it."""
    from mmlu_track.support.credentials import remember_overrides

    remember_overrides(sys.argv[1:])
    stream = sys.stderr
    sys.stderr = _RedactedStream(stream)
    try:
        yield
    finally:
        sys.stderr = stream
