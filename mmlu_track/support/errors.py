"""The one error base: a fault of the user's input or of the surroundings, said in one line.

Every error the package raises on purpose derives from `MmluTrackError` (its kinds live where they
are raised: `settings.typed.ConfigError`, `eval.data.DataError`, `eval.backend.ModelError`,
`store.db.StoreError`, ...). The commands catch it once (`commands/exits.py`, `commands/runs.py`):
its first line goes to stderr and the process exits with its `exit_code`. An exception of any
other type that reaches a command is a bug: it exits 70 (`EXIT_BUG`, sysexits' EX_SOFTWARE), says
so in one line and points at its saved traceback, never disguised as a bad input.

Exit codes: 0 done (or a gate passed), 1 only a gate's verdict (regression, or not shown; never
an exception's), 2 unusable input (a typo, an unknown run, a store that cannot be read), 70 a bug,
130 Ctrl-C, 143 SIGTERM.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_PASS = 0
EXIT_REGRESSION = 1  # a gate's verdict only: a regression, or non-inferiority not shown
EXIT_ERROR = 2  # unusable input: the user's or the surroundings' fault, said in one line
EXIT_BUG = 70  # sysexits.h EX_SOFTWARE: an exception no check foresaw, never the user's input


class MmluTrackError(Exception):
    """A fault of the input or the surroundings (never a bug), in one line."""

    exit_code: ClassVar[int] = EXIT_ERROR
    # Raised before a run is claimed or any result written: the command leaves no output folder.
    # A kind raised only then says so itself; the pipeline marks any other it sees before a claim.
    before_any_work: bool = False


def json_problem(err: ValueError, line: int | None = None) -> str:
    """What is wrong with a JSON text, said with its place (`json.JSONDecodeError`'s own message ends
    in "at" with the place apart, and names a raw control character only by that phrase); `line`:
    the file's line the text was (a JSON Lines file's), for the text's own line 1."""
    import json

    if not isinstance(err, json.JSONDecodeError):
        return str(err)
    what = err.msg.removesuffix(" at")  # "Unterminated string starting at": the place follows
    if what.startswith("Invalid control character") and err.pos < len(err.doc):
        what = f"a raw control character {err.doc[err.pos]!r} inside a string (JSON needs it escaped)"
    return f"{what} at line {err.lineno if line is None else line}, column {err.colno}"
