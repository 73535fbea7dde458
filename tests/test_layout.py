"""The package's layout rules, checked on its source: seams, no import cycle, heavy imports where used."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mmlu_track"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every module's imports, those inside functions included (they can form cycles too)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module(path)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                # `from mmlu_track.eval import models` imports the module mmlu_track.eval.models
                found.update(f"{node.module}.{a.name}" for a in node.names)
        graph[name] = found
    return graph


GRAPH = _imports()
OWN = set(GRAPH)


def _own(module: str) -> set[str]:
    return {m for m in GRAPH[module] if m in OWN and m != module}


def test_no_import_cycle() -> None:
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(_own(module)):
            if state.get(dep) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path[path.index(dep) :], dep]))
            if dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])


@pytest.mark.parametrize(
    ("seam", "never"),
    [
        ("mmlu_track.eval", ("mmlu_track.gate", "mmlu_track.cli", "mmlu_track.runs")),
        (
            "mmlu_track.store",
            (
                "mmlu_track.gate",
                "mmlu_track.cli",
                "mmlu_track.eval.pipeline",
                "mmlu_track.eval.models",
                "mmlu_track.eval.scoring",
            ),
        ),
        ("mmlu_track.gate", ("mmlu_track.cli", "mmlu_track.eval.pipeline", "mmlu_track.eval.models")),
    ],
)
def test_data_flows_one_way_along_the_seams(seam: str, never: tuple[str, ...]) -> None:
    for module in (m for m in GRAPH if m.startswith(seam)):
        bad = sorted(d for d in _own(module) if d.startswith(never))
        assert not bad, f"{module} imports {bad}"


def test_hydra_stops_at_the_entry_points() -> None:
    users = sorted(
        m for m, deps in GRAPH.items() if any(d.split(".")[0] in ("hydra", "omegaconf") for d in deps)
    )
    assert users == ["mmlu_track.cli"]


def test_reading_runs_and_gating_never_import_torch() -> None:
    modules = ["mmlu_track.runs", "mmlu_track.gate.run", "mmlu_track.store.mlflow", "mmlu_track.store.sql"]
    heavy = "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    code = f"import sys\nfor m in {modules!r}: __import__(m)\n{heavy}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=99)
    assert out.stdout.strip() == "[]"


def test_no_module_is_much_over_400_lines() -> None:
    long = {_module(p): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 420}
    assert not long
