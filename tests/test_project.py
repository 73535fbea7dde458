"""The README's commands are what CI runs."""

from __future__ import annotations

import re

from .conftest import ROOT


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_the_readme_setup_and_test_commands() -> None:
    blocks = _bash_blocks((ROOT / "README.md").read_text())
    setup = next(b for b in blocks if b.startswith("pip install torch==2.13.0"))
    assert "python -m pytest" in blocks
    ci = (ROOT / ".ci" / "run").read_text()
    assert setup.replace("pip install", "python -m pip install") in ci
    assert re.search(r"^python -m pytest$", ci, flags=re.M)
    assert "python -m mmlu_track experiment=quick" in blocks


def test_torch_is_pinned_to_the_cpu_wheel_range() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"torch>=2.13,<2.14"' in pyproject
