"""Where the package's data folders are: `conf/` (Hydra configs) and `migrations/` (Alembic).

Both live at the repository's top level and are copied into the wheel as `mmlu_track/conf` and
`mmlu_track/migrations` (see `[tool.setuptools]` in pyproject.toml). An installed wheel finds them
inside the package; an editable install or a checkout finds them beside it.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def _bundled(name: str) -> Path:
    inside = Path(str(importlib.resources.files("mmlu_track"))) / name
    return inside if inside.is_dir() else Path(__file__).resolve().parents[2] / name


CONF_DIR = _bundled("conf")
MIGRATIONS_DIR = _bundled("migrations")
