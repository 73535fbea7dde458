"""support/console.py: a warning is one line on stderr, apart from the results on stdout; stderr
under `redacted_stderr` never shows a password the command was given, and is stderr again after."""

from __future__ import annotations

import sys

import pytest

from mmlu_track.support.console import redacted_stderr, warn


def test_a_warning_is_one_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    warn("MLflow is down; the run is kept")
    assert capsys.readouterr() == ("", "mmlu_track: warning: MLflow is down; the run is kept\n")


def test_stderr_loses_the_passwords_of_the_command_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["mmlu-track", "tracking.db_url=postgresql://bob:p@ss%word@h/db"])
    before = sys.stderr
    with redacted_stderr():
        # Hydra prints a failed job's overrides as given, the password decoded or not.
        print("failed: tracking.db_url=postgresql://bob:p@ss%word@h/db (p@ss%word)", file=sys.stderr)
        sys.stderr.flush()  # the stream's other methods pass through
    assert sys.stderr is before
    err = capsys.readouterr().err
    assert "p@ss%word" not in err
    assert err.startswith("failed: tracking.db_url=postgresql://bob:***@h/db")
