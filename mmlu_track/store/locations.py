"""Where a run's stores are: the one place that resolves the MLflow URI and makes relative paths
(a SQLite file, a local folder) absolute.

- `mlflow_uri(configured, base)`: `tracking.mlflow_uri`, else the environment's
  `MLFLOW_TRACKING_URI`, else MLflow's default (`sqlite:///mlflow.db`, MLflow >= 3.7); a relative
  SQLite file or local folder made absolute against `base` (default: the working directory). A run
  records into this URI from its start, so `runs sync` from another shell or folder, and every
  shard of a launch (whose jobs run in other folders), reach the same store.
- `absolute_sqlite(url, base)`: `sqlite:///relative.db` (also SQLite's URI form,
  `sqlite:///file:rel.db?mode=ro&uri=true`) against `base`; any other URL as given.
- `absolute_path(value, base)`: a relative filesystem path against `base`; `~` and absolute paths
  as given (they mean the same wherever a job runs).

No MLflow import here: resolving a URI must not cost MLflow's import.
"""

from __future__ import annotations

import os
from pathlib import Path

SQLITE = "sqlite:///"
MLFLOW_DEFAULT = "sqlite:///mlflow.db"  # MLflow >= 3.7's own default tracking URI


def absolute_sqlite(url: str, base: Path) -> str:
    """`sqlite:///relative.db` against `base`; any other URL (absolute, in-memory, a server) as is."""
    if not url.startswith(SQLITE) or url.startswith(SQLITE + "/") or ":memory:" in url:
        return url
    path, sep, query = url[len(SQLITE) :].partition("?")
    scheme = "file:" if path.startswith("file:") else ""  # SQLite's URI form (`?mode=ro&uri=true`)
    path = path.removeprefix(scheme)
    if not path or Path(path).is_absolute():
        return url
    return f"{SQLITE}{scheme}{(base / Path(path).expanduser()).resolve()}{sep}{query}"


def absolute_path(value: str, base: Path, *, only_existing: bool = False) -> str:
    """A relative filesystem path against `base` (when `only_existing`, only if it exists there:
    `org/model` may be a hub id as well as a folder)."""
    path = Path(value)
    if value.startswith("~") or path.is_absolute() or (only_existing and not (base / path).exists()):
        return value
    return str((base / path).resolve())


def is_local_folder(uri: str) -> bool:
    """A bare path: MLflow's file store (`./mlruns`), not a URL, `file:` URI or Databricks."""
    return "://" not in uri and not uri.startswith(("file:", "databricks"))


def mlflow_uri(configured: str | None, base: Path | None = None) -> str:
    """The MLflow tracking URI a run records into (see the module's docstring)."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI") or MLFLOW_DEFAULT
    where = base if base is not None else Path.cwd()
    if uri.startswith(SQLITE):
        return absolute_sqlite(uri, where)
    if is_local_folder(uri):
        return absolute_path(uri, where)
    return uri


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///` URI as a path (None for any other URI, or SQLite's `file:` form)."""
    if not uri.startswith(SQLITE):
        return None
    path = uri[len(SQLITE) :].partition("?")[0]
    return None if not path or path.startswith("file:") or ":memory:" in path else Path(path).expanduser()


def missing_folder(uri: str) -> str | None:
    """Why a SQLite MLflow store cannot be made where `uri` says: its folder does not exist (a
    folder the user did not make is never made for it, as for the results database); else None."""
    path = sqlite_path(uri)
    if path is None or path.parent.is_dir():
        return None
    return (
        f"the MLflow store's folder {path.parent} does not exist: create it, or give "
        "tracking.mlflow_uri a file in an existing folder"
    )
