"""commands/compose.py: an interpolation that fails is one line naming its key, in every command."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ..conftest import CliResult


@pytest.mark.parametrize(
    ("which", "override", "key"),
    [
        ("noise", "noise.experiment=${oops}", "noise.experiment"),  # read before the evaluation's
        ("noise", "model.name=${oops}", "model.name"),
        ("eval", "model.name=${oops}", "model.name"),
        ("compare", "baseline=${oops}", "baseline"),
    ],
)
def test_a_failing_interpolation_is_one_line_naming_its_key(
    cli: Callable[..., CliResult], tmp_path: Path, which: str, override: str, key: str
) -> None:
    """The noise command's spanned several lines (a traceback, then Hydra's hint): its own settings
    were resolved outside the one place errors become exit codes, and every command iterated
    Hydra's overrides, which resolves an override's `${...}` before any check."""
    extra = ["candidate=x"] if which == "compare" else ["model=tiny"]
    proc = cli(which, override, *extra, f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert proc.code == 2
    assert proc.err.strip().splitlines() == [f"mmlu_track: error: {key}: Interpolation key 'oops' not found"]
