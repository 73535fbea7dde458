"""What the package tells its user beside its results: one warning line on stderr.

`warn(message)` prints `mmlu_track: warning: <message>` to stderr, the message as given (a caller
that names a URL redacts it first: `credentials.redact`). Pure: the standard library only, so any
layer may use it.
"""

from __future__ import annotations

import sys


def warn(message: str) -> None:
    """One warning on stderr, apart from the results on stdout."""
    print(f"mmlu_track: warning: {message}", file=sys.stderr)
