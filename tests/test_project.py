"""The README's commands are what CI runs."""

from __future__ import annotations

import re

from .conftest import ROOT


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_the_readme_setup_and_test_commands() -> None:
    blocks = _bash_blocks((ROOT / "README.md").read_text())
    # The README has three set-ups (CPU, GPU, dev/test): CI runs the dev/test one.
    setup = next(b for b in blocks if b.startswith("pip install torch==2.13.0") and '".[dev]"' in b)
    # The fast tier, then every tier a CPU runs: CI runs the second, the README's own words.
    assert "python -m pytest\npython -m pytest -m 'not gpu'" in blocks
    ci = (ROOT / ".ci" / "run").read_text()
    for line in setup.splitlines():  # each command as .ci/run runs it (a comment is the README's)
        assert line.split("  #")[0].strip().replace("pip install", "python -m pip install") in ci, line
    assert re.search(r"^python -m pytest -m 'not gpu'$", ci, flags=re.M)
    assert "python -m mmlu_track experiment=quick" in blocks


def test_torch_is_pinned_to_the_cpu_wheel_range() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"torch>=2.13,<2.14"' in pyproject


def test_release_gate_reuses_the_callable_workflow() -> None:
    reusable = (ROOT / ".github" / "workflows" / "mmlu-gate.yml").read_text()
    assert "workflow_call:" in reusable
    assert "python -m mmlu_track.compare" in reusable
    release = (ROOT / ".github" / "workflows" / "release-gate.yml").read_text()
    assert "uses: ./.github/workflows/mmlu-gate.yml" in release
    assert "workflow_dispatch:" in release


def test_no_test_reads_a_path_of_one_machine() -> None:
    """A test fell back to an absolute path of one machine for the shared folder (issue 86): the
    shared folder is `conftest.SHARED_DIR` (../shared, or MMLU_TRACK_SHARED)."""
    found = [
        f"{p.relative_to(ROOT)}: {line.strip()}"
        for p in (ROOT / "tests").rglob("*.py")
        for line in p.read_text(encoding="utf-8").splitlines()
        if re.search(r"""["'](/work|/root|/home)/""", line)
    ]
    assert found == []
