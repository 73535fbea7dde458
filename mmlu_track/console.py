"""What the package tells its user beside its results: one warning line on stderr.

`warn(message)` prints `mmlu_track: warning: <message>` to stderr, the message as given (a caller
that names a URL redacts it first: `credentials.redact`). `reader_gone()`: what a command does
when its output's reader has closed (`... | head`). Pure: the standard library only, so any layer
may use it.
"""

from __future__ import annotations

import os
import sys


def warn(message: str) -> None:
    """One warning on stderr, apart from the results on stdout."""
    print(f"mmlu_track: warning: {message}", file=sys.stderr)


def reader_gone(code: int) -> int:
    """stdout's reader closed early (`runs list | head`): the rest of the output goes nowhere and
    the command ends with `code`, not a BrokenPipeError traceback (Python's documented recipe:
    stdout pointed at devnull so the interpreter's last flush cannot fail again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return code
