"""The runs table a reviewer opens: a saved view of each experiment, written by mmlu_track.

MLflow's experiment page keeps named views as experiment tags (`mlflow.sharedViewState.<id>`, a
JSON envelope `{name, createdAt, updatedAt, state}` whose `state` is the page's UI state: visible
columns, their order and widths, the charts' search). The UI lists them under **Views** and opens
one from `#/experiments/<id>/runs?viewStateShareKey=<id>`; `workflowType=machine_learning` skips
MLflow 3's GenAI overview. Ours, `mmlu_track`, shows what tells runs apart and how they scored:

- evaluations: the full run name (the settings that differ sit after the model name, which the
  default column width cuts off), the description's first line (micro accuracy with its interval;
  a circular run's circular accuracy, the accuracy as given beside it), `acc_micro`, the dataset,
  the latest gate's verdict, k / dtype / formulation / scoring; the charts narrowed to the
  micro/macro (and circular) and category accuracies (not 165 per-subject bars).
- comparisons: the name (verdict, then what differs), the verdict, Δ, the lower bound that decides
  PASS beside the margin, then the description's first line (verdict, Δ with its interval), both
  accuracies, the p-value of the drop test, the mode.

A view a user saved over ours (MLflow's "Override saved view") carries no `mmlu_track_view` field:
it is theirs and left alone; ours is rewritten only when this version's layout is newer. Pure: the
caller writes the tag.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Literal
from urllib.parse import quote

from mmlu_track.support.credentials import strip_userinfo

VIEW_ID = "mmlu_track"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
VERSION = 7  # raise when the layout changes: experiments holding an older one get the new one
LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves a local store by default
SERVED_BY_MLFLOW_UI = ("file", "sqlite", "postgresql", "mysql", "mssql")  # `mlflow ui --backend-store-uri`
Kind = Literal["evaluations", "comparisons"]
# An experiment's kind, for MLflow versions that open a page by it (GenAI or training tabs). 3.17
# does not: it goes by the link's `workflowType` (ML_PAGES) or the browser's stored choice.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
ML_PAGES = "workflowType=machine_learning"  # a link's query: MLflow 3.17 decides by it, not by the kind


def _col(kind: str, name: str) -> str:
    return f"{kind}.`{name}`"  # MLflow's canonical column key


RUN_NAME = _col("attributes", "Run Name")
DESCRIPTION = _col("attributes", "Description")
# (column, width in px): the order the table shows them in, after the pinned run name and date
COLUMNS: dict[Kind, tuple[tuple[str, int], ...]] = {
    "evaluations": (
        # Measured in MLflow 3.17.2 at 1,600 px: 626 shows a 103-character name whole (520 cut the
        # noise command's and shot-seed names); a longer name widens it (`name_width`).
        (RUN_NAME, 640),
        (DESCRIPTION, 360),
        (_col("metrics", "acc_micro"), 100),
        (_col("attributes", "Dataset"), 260),
        (_col("tags", "mmlu_track.gate"), 300),
        (_col("params", "k"), 60),
        (_col("params", "dtype"), 90),
        (_col("params", "formulation"), 100),
        (_col("params", "scoring"), 90),
    ),
    "comparisons": (
        # What decides first: at 1,600 px MLflow's assistant panel takes a third of the page, and
        # columns after a 600 px name and the description were off-screen.
        (RUN_NAME, 360),
        (_col("tags", "verdict"), 100),
        # Wide enough for the metric's whole name and a rounded value (MLflow cuts both)
        (_col("metrics", "gate/delta_micro_pts"), 150),
        # The bound that decides PASS / INCONCLUSIVE, beside the margin it is held against (−δ)
        (_col("metrics", "gate/lower_bound_pts"), 150),
        (_col("params", "margin_pts"), 100),
        (DESCRIPTION, 360),
        (_col("metrics", "gap/delta_micro_pts"), 170),
        (_col("metrics", "baseline/acc_micro"), 170),
        (_col("metrics", "candidate/acc_micro"), 180),
        (_col("metrics", "gate/p_regression"), 150),
        (_col("params", "mode"), 100),
    ),
}
# The charts view's search (a regular expression over metric names)
CHARTS: dict[Kind, str] = {
    "evaluations": r"^(acc|circular)_m(icro|acro)$|^acc/category/",
    "comparisons": r"^(gate|gap)/delta_micro_pts$|^gate/lower_bound_pts$"
    r"|^(baseline|candidate)/acc_micro$",
}
# A run's colour dot (the runs table, every chart), which MLflow otherwise picks at random: red and
# green beside a verdict read as the verdict. A comparison's is its verdict's; an evaluation's is
# one of a palette without red or green (Okabe-Ito and Tableau hues), fixed by its run id.
RUN_COLOR_TAG = "mlflow.runColor"
VERDICT_COLORS = {
    "pass": "#1A7F37",
    "regression": "#CF222E",
    "inconclusive": "#BF8700",
    "analysis": "#6E7781",
}
EVALUATION_COLORS = ("#0072B2", "#E69F00", "#56B4E9", "#CC79A7", "#9467BD", "#8C564B", "#17BECF", "#7F7F7F")


def evaluation_color(run_id: str) -> str:
    """An evaluation's colour: the same on every page and every re-log (`runs sync`)."""
    return EVALUATION_COLORS[int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % len(EVALUATION_COLORS)]


# MLflow's run-name cell: its text about 5.65 px a character wide (the names measured: 5.5-5.7), 6 kept
# for wider glyphs, and 44 px beside it (the colour dot and padding).
PX_PER_CHAR, CELL_PX = 6.0, 44


def name_width(name: str) -> int:
    """The Run Name column's width in px that shows `name` whole."""
    return int(len(name) * PX_PER_CHAR + CELL_PX + 0.5)


def name_column(current: str | None) -> int:
    """The Run Name width of a view tag (0 where there is none, or not a view this version reads)."""
    if current is None:
        return 0
    try:
        return int(json.loads(json.loads(current)["state"])["columnWidths"][RUN_NAME])
    except (ValueError, KeyError, TypeError):
        return 0


def envelope(kind: Kind, now_ms: int | None = None, name_px: int = 0) -> str:
    """The tag value of the `mmlu_track` view of an experiment of `kind`, its Run Name column at least
    `name_px` wide (`name_width` of the longest name logged into it)."""
    columns = tuple((key, max(px, name_px) if key == RUN_NAME else px) for key, px in COLUMNS[kind])
    state = {
        "selectedColumns": [key for key, _ in columns if key != RUN_NAME],
        "columnOrder": [key for key, _ in columns],  # MLflow applies widths only to ordered columns
        "columnWidths": dict(columns),
        "runsHiddenMode": "SHOW_ALL",  # charts take every run, not MLflow's first ten
        "chartsSearchFilter": CHARTS[kind],
    }
    now = int(time.time() * 1000) if now_ms is None else now_ms
    envelope = {"name": VIEW_ID, "createdAt": now, "updatedAt": now, "state": json.dumps(state)}
    return json.dumps({**envelope, "mmlu_track_view": VERSION})


def needs_writing(current: str | None, name_px: int = 0) -> bool:
    """Whether the experiment's view tag (its value, None when absent) should be (re)written: absent,
    ours from an older layout, or ours with a Run Name column narrower than `name_px` (a run's name
    would be cut). A view without our field is a user's: kept."""
    if current is None:
        return True
    try:
        version = json.loads(current).get("mmlu_track_view")
    except (ValueError, AttributeError):
        return False  # not ours to repair
    return isinstance(version, int) and (version < VERSION or name_column(current) < name_px)


def _scheme(uri: str) -> str:
    """`postgresql+psycopg://…` -> postgresql; a bare path is a file store; `databricks[-uc]` is not."""
    if "://" in uri:
        return uri.partition("://")[0].partition("+")[0]
    return "databricks" if uri.startswith("databricks") else "file"


def _ui(uri: str) -> str | None:
    """Where the UI of a resolved tracking URI is: the tracking server, or `mlflow ui`'s default for
    a store it serves (a file or a database); None where neither (Databricks: its own workspace UI).
    Without the URI's credentials (a link is printed, pasted and shared), percent-encoded (a `)`,
    `<` or space in the URI would end a Markdown link or start markup)."""
    if uri.startswith(("http://", "https://")):
        return quote(strip_userinfo(uri).rstrip("/"), safe=":/?#[]@!$&'*+,;=%~")
    return LOCAL_UI if _scheme(uri) in SERVED_BY_MLFLOW_UI else None


def url(uri: str, experiment_id: str) -> str | None:
    """The view's address for a resolved tracking URI (`mlflow_client.resolved_uri`), where it has a UI."""
    base = _ui(uri)
    if base is None:
        return None
    return f"{base}/#/experiments/{experiment_id}/runs?{ML_PAGES}&viewStateShareKey={VIEW_ID}"


def page(uri: str, experiment_id: str | None, run_id: str) -> str | None:
    """A run's page for a resolved tracking URI, where it has a UI, on MLflow's machine-learning
    pages: without `workflowType`, MLflow 3.17 opens any page under its GenAI tabs in a browser that
    has not picked **Model training**. Without the experiment, MLflow's bare run link (its redirect
    drops the setting)."""
    base = _ui(uri)
    if base is None:
        return None
    run = quote(run_id, safe="")
    if experiment_id is None:
        return f"{base}/#/runs/{run}"
    return f"{base}/#/experiments/{quote(experiment_id, safe='')}/runs/{run}?{ML_PAGES}"
