"""The package's layout rules, checked on its source: seams, no import cycle, heavy imports where used;
and the tests mirror it (every module imported by the tests of its own folder)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import subprocess
import sys
import tomllib
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


# docs/architecture.md's rule, folder by folder: what each part may import (its own modules besides).
# The floor is ordered: support <- stats <- settings <- records, each importing only those before it.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "mmlu_track.support": (),
    "mmlu_track.stats": ("mmlu_track.support",),
    "mmlu_track.settings": ("mmlu_track.support", "mmlu_track.stats"),
    "mmlu_track.records": ("mmlu_track.support", "mmlu_track.stats", "mmlu_track.settings"),
}
FLOOR = tuple(MAY_IMPORT)
MAY_IMPORT |= {
    "mmlu_track.eval": FLOOR,
    "mmlu_track.store": FLOOR,
    "mmlu_track.gate": (*FLOOR, "mmlu_track.store"),
    "mmlu_track.imports": (*FLOOR, "mmlu_track.eval"),  # other tools' runs, read as this tool's
    "mmlu_track.pipeline": (*FLOOR, "mmlu_track.eval", "mmlu_track.imports", "mmlu_track.store"),
    "mmlu_track.commands": (
        *FLOOR,
        "mmlu_track.eval",
        "mmlu_track.imports",
        "mmlu_track.store",
        "mmlu_track.gate",
        "mmlu_track.pipeline",
    ),
}
# The package's root holds only `python -m` shims: each imports one command module and nothing else.
SHIMS = ("mmlu_track.__main__", "mmlu_track.compare", "mmlu_track.noise", "mmlu_track.runs")


def _within(module: str, parts: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in parts)


def _part(module: str) -> str:
    """The folder (part of the layout) a module is in, or the module itself at the root."""
    return next((p for p in MAY_IMPORT if _within(module, (p,))), module)


def test_the_root_holds_only_shims_and_folders() -> None:
    at_root = sorted(m for m in GRAPH if not _within(m, tuple(MAY_IMPORT)) and m != "mmlu_track")
    assert at_root == sorted(SHIMS)
    for shim in SHIMS:
        assert _own(shim), shim
        assert all(_within(d, ("mmlu_track.commands",)) for d in _own(shim)), shim


@pytest.mark.parametrize("part", sorted(MAY_IMPORT))
def test_each_part_imports_only_the_parts_below_it(part: str) -> None:
    allowed = (*MAY_IMPORT[part], part)
    modules = [m for m in GRAPH if _part(m) == part]
    assert modules, f"no module in {part}"
    for module in modules:
        bad = sorted(d for d in _own(module) if d != "mmlu_track" and not _within(d, allowed))
        assert not bad, f"{module} imports {bad}"


def test_no_package_imports_another_that_imports_it() -> None:
    parts = {
        (_part(m), _part(d)) for m in GRAPH for d in _own(m) if d != "mmlu_track" and _part(m) != _part(d)
    }
    assert not sorted((a, b) for a, b in parts if (b, a) in parts)


def test_above_the_store_no_module_imports_the_orm() -> None:
    users = sorted(
        m for m in GRAPH if _part(m) not in ("mmlu_track.store",) and "mmlu_track.store.orm" in _own(m)
    )
    assert users == []


MLFLOW_ROOM = "mmlu_track.store.mlflow"


def test_mlflow_is_one_room_of_the_store_with_one_face() -> None:
    """Outside the room only its face (`store/mlflow/__init__.py`) is imported, never a module of it;
    only the room imports MLflow itself; and the face names no tag, page or client."""
    inside = [m for m in GRAPH if m.startswith(MLFLOW_ROOM + ".")]
    assert {m.rsplit(".", 1)[1] for m in inside} >= {"client", "live", "comparison", "registry", "sync"}
    reaching = sorted(
        f"{m} -> {d}"
        for m in GRAPH
        if not _within(m, (MLFLOW_ROOM,))
        for d in _own(m)
        if d.startswith(MLFLOW_ROOM + ".")
    )
    assert reaching == []
    users = sorted(m for m in GRAPH if not _within(m, (MLFLOW_ROOM,)) and MLFLOW_ROOM in _own(m))
    assert {"mmlu_track.gate.publish", "mmlu_track.gate.run", "mmlu_track.commands.runs"} <= set(users)
    assert all(_part(m) in ("mmlu_track.store", "mmlu_track.gate", "mmlu_track.commands") for m in users)
    mlflow_users = sorted(m for m, deps in GRAPH.items() if any(d.split(".")[0] == "mlflow" for d in deps))
    assert mlflow_users
    assert all(_within(m, (MLFLOW_ROOM,)) for m in mlflow_users), mlflow_users
    import mmlu_track.store.mlflow as face

    assert not [n for n in face.__all__ if re.search(r"tag|TAG|client|Client|NOTE|VIEW", n)]


def test_hydra_stops_at_the_entry_points() -> None:
    users = sorted(
        m for m, deps in GRAPH.items() if any(d.split(".")[0] in ("hydra", "omegaconf") for d in deps)
    )
    assert users == [
        "mmlu_track.commands.cli",
        "mmlu_track.commands.compose",
        "mmlu_track.commands.exits",
        "mmlu_track.commands.launchers",
    ]


# The model-backend seam (eval/backend.py): the in-process transformers backend is these modules;
# outside them only eval/load.py's BACKENDS map reaches it, inside the loader it calls.
IN_PROCESS = {
    f"mmlu_track.eval.{m}"
    for m in ("in_process", "models", "scoring", "generate", "batching", "prefix_cache", "prefix_attention")
}


# The loaders pick their backend; the served one tokenizes with transformers' AutoTokenizer when
# model.tokenizer is given (in the function that needs it), and never imports torch.
ALLOWED_HEAVY = {
    "mmlu_track.eval.load": {"mmlu_track.eval.in_process"},
    "mmlu_track.eval.openai_connect": {"transformers", "transformers.AutoTokenizer"},
    # lm-eval's recorded chat template, rendered as `tokenizer.apply_chat_template` renders it
    "mmlu_track.imports.lm_eval_prompts": {
        "transformers.utils.chat_template_utils",
        "transformers.utils.chat_template_utils.render_jinja_template",
    },
}


def test_above_the_model_seam_nothing_imports_torch_or_the_in_process_backend() -> None:
    heavy = {"torch", "transformers"}
    for module in sorted(set(GRAPH) - IN_PROCESS):
        reached = {d for d in GRAPH[module] if d.split(".")[0] in heavy or d in IN_PROCESS}
        allowed = ALLOWED_HEAVY.get(module, set())
        assert reached <= allowed, f"{module} imports {sorted(reached - allowed)}"
    # the served backend is reached through BACKENDS only, as the in-process one
    users = {m for m, deps in GRAPH.items() if "mmlu_track.eval.openai_connect" in deps}
    assert users == {"mmlu_track.eval.load"}
    users = {m for m, deps in GRAPH.items() if "mmlu_track.eval.openai_api" in deps}
    assert users == {"mmlu_track.eval.openai_connect"}
    for module in IN_PROCESS - {"mmlu_track.eval.in_process"}:  # the backend is whole behind the seam
        assert "mmlu_track.eval.load" not in GRAPH[module]


def test_every_model_source_has_a_backend() -> None:
    from typing import get_args

    from mmlu_track.eval.load import BACKENDS
    from mmlu_track.settings.config import ModelSource

    assert set(BACKENDS) == set(get_args(ModelSource))


def test_reading_runs_gating_and_planning_never_import_torch() -> None:
    # What a run with a served model imports before its backend loads: the whole pipeline.
    modules = ["mmlu_track.commands.runs", "mmlu_track.gate.run", "mmlu_track.store.mlflow",
               "mmlu_track.store.sql", "mmlu_track.commands.cli", "mmlu_track.pipeline.evaluate",
               "mmlu_track.eval.load",
               "mmlu_track.eval.openai_api", "mmlu_track.eval.openai_connect"]  # fmt: skip
    heavy = "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    code = f"import sys\nfor m in {modules!r}: __import__(m)\n{heavy}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=99)
    assert out.stdout.strip() == "[]"


TESTS = Path(__file__).resolve().parent


@functools.cache
def _imported_by(path: Path) -> set[str]:
    """The package's modules a test file imports, at module level or inside a test
    (`from mmlu_track.eval import models` names mmlu_track.eval.models)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found & OWN


def test_every_module_is_imported_by_the_tests_of_its_own_folder() -> None:
    """The tests mirror the package: mmlu_track/<part>/[<sub>/]<module>.py is imported by a
    test_*.py in tests/<part>/[<sub>/] (or, for a module of a subfolder, in a folder above it up to
    tests/<part>/). The root's `python -m` shims and the packages' `__init__.py` aside."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if path.name == "__init__.py" or len(relative.parts) == 1:  # a package's face, a root shim
            continue
        module = _module(path)
        folders = [TESTS.joinpath(*relative.parts[:i]) for i in range(len(relative.parts) - 1, 0, -1)]
        tests = [t for folder in folders if folder.is_dir() for t in sorted(folder.glob("test_*.py"))]
        if not any(module in _imported_by(t) for t in tests):
            mirror = folders[0].relative_to(TESTS.parent)
            missing.append(f"{module} (no test in {mirror}/ imports it: write {mirror}/test_{path.stem}.py)")
    assert not missing, "modules no test of their own folder imports:\n" + "\n".join(missing)


def test_no_module_is_much_over_400_lines() -> None:
    long = {_module(p): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 420}
    assert not long


def _trees() -> dict[str, ast.Module]:
    """Every source file of the package, parsed, by its path from the repository root."""
    return {
        p.relative_to(PACKAGE.parent).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
        for p in sorted(PACKAGE.rglob("*.py"))
    }


def test_no_function_is_over_60_lines() -> None:
    # From `def` to its last line (decorators aside): 60 is allowed, 61 is not.
    long = {
        f"{path}:{node.lineno} {node.name}": lines
        for path, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > 60
    }
    assert not long


# `assert` vanishes under `python -O`: a check the package relies on raises instead.
ASSERTS_ALLOWED_IN: set[str] = set()


def test_no_assert_statements_in_the_package() -> None:
    found = sorted(
        f"{path}:{node.lineno}"
        for path, tree in _trees().items()
        if path not in ASSERTS_ALLOWED_IN
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
    )
    assert not found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement(spec: str) -> str:
    """The distribution a requirement names: `ray[default]>=2.40,<3` -> `ray`."""
    return _normal(re.split(r"[\s\[<>=!~;@(]", spec, maxsplit=1)[0])


def _third_party_imports() -> set[str]:
    """Top-level names the package imports (inside functions too), the standard library aside."""
    names: set[str] = set()
    for tree in _trees().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.partition(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.partition(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "mmlu_track"}


def test_every_imported_package_is_declared() -> None:
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    required = {_requirement(spec) for spec in project["dependencies"]}
    # An optional group is enough (an import there is guarded inside the function that needs it).
    optional = {
        _requirement(spec): group
        for group, specs in project.get("optional-dependencies", {}).items()
        for spec in specs
    }
    providers = importlib.metadata.packages_distributions()
    undeclared, in_groups = [], []
    for name in sorted(_third_party_imports()):
        # One import name may come from several distributions (mlflow, mlflow-skinny): any declared will do.
        dists = {_normal(d) for d in providers.get(name, [])}
        if dists & required:
            continue
        if groups := sorted({optional[d] for d in dists if d in optional}):
            in_groups.append(f"{name} ({', '.join(groups)})")
        else:
            undeclared.append(f"{name} (from {', '.join(sorted(dists)) or 'no installed distribution'})")
    if in_groups:  # shown with -s or -rP
        print(f"imported, declared in optional groups only: {', '.join(in_groups)}")
    assert not undeclared, f"imported by mmlu_track, not declared in pyproject.toml: {undeclared}"


def _harness() -> list[Path]:
    """The suite's own machinery: every test-folder module but the tests, their data, the legacy records."""

    def machinery(p: Path) -> bool:
        return not p.name.startswith("test_") and p.name != "legacy.py" and "data" not in p.parts

    return [p for p in sorted(TESTS.rglob("*.py")) if machinery(p.relative_to(TESTS))]


def test_the_harness_stays_small_and_leaves_cpythons_internals_alone() -> None:
    """Tiers and fakes keep the suite fast, not machinery: the harness is under 1,200 lines and no
    test module touches a private name of `threading`, `atexit` or `multiprocessing`."""
    assert sum(len(p.read_text().splitlines()) for p in _harness()) < 1200
    private = sorted(
        f"{p.relative_to(TESTS)}:{node.lineno} {node.value.id}.{node.attr}"
        for p in TESTS.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id in ("threading", "atexit", "multiprocessing") and node.attr.startswith("_")
    )  # fmt: skip
    assert not private
