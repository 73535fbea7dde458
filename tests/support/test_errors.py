"""support/errors.py: the exit codes every command uses, and the one error base: a fault of the
input or the surroundings (exit 2 unless its kind says otherwise), never raised as a bug."""

from __future__ import annotations

from mmlu_track.support import errors
from mmlu_track.support.errors import EXIT_BUG, EXIT_ERROR, EXIT_PASS, EXIT_REGRESSION, MmluTrackError


def test_the_exit_codes_are_the_documented_ones() -> None:
    assert (EXIT_PASS, EXIT_REGRESSION, EXIT_ERROR, EXIT_BUG) == (0, 1, 2, 70)
    for code in ("0 done", "1 only a gate's verdict", "2 unusable input", "70 a bug"):
        assert code in " ".join((errors.__doc__ or "").split())


def test_the_base_is_an_input_error_said_in_one_line_and_its_kinds_keep_it() -> None:
    from mmlu_track.eval.data import DataError
    from mmlu_track.settings.typed import ConfigError
    from mmlu_track.store.db import StoreError

    err = MmluTrackError("no such subject: anatomyy")
    assert (err.exit_code, err.before_any_work, str(err)) == (EXIT_ERROR, False, "no such subject: anatomyy")
    assert not issubclass(MmluTrackError, SystemExit | KeyboardInterrupt)  # caught by `except Exception`
    for kind in (ConfigError, DataError, StoreError):
        assert issubclass(kind, MmluTrackError)
        assert kind("x").exit_code == EXIT_ERROR


def test_a_json_problem_is_said_with_its_place_and_a_raw_control_character_by_name() -> None:
    import json

    import pytest

    cases = [
        (
            '{"a": "x\x01y"}',
            "a raw control character '\\x01' inside a string (JSON needs it escaped) at line 1, column 9",
        ),
        ('{"a": 1,\n "b": }', "Expecting value at line 2, column 7"),
    ]
    for text, said in cases:
        with pytest.raises(json.JSONDecodeError) as got:
            json.loads(text)
        assert errors.json_problem(got.value) == said
        assert errors.json_problem(got.value, 12).endswith(f"at line 12, column {got.value.colno}")
    assert errors.json_problem(ValueError("not JSON at all")) == "not JSON at all"
