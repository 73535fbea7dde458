"""A decided comparison: the one record every rendering (`report`, `plot`) and the verdict's
record (`publish`) read — statistics, verdict, both runs, settings, the sequential gate's own
section when it decided, and the paired questions' results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mmlu_track.gate.policy import Verdict
from mmlu_track.gate.stats import Comparison
from mmlu_track.records.results import Docs, QuestionResult
from mmlu_track.records.run import RunRecord
from mmlu_track.records.stored import StoredRun
from mmlu_track.settings.config import CompareConfig

# A stored run's questions' text (`eval.plan.question_docs`), given by an entry point: the gate
# reads no data. For MLflow's per-question table of a comparison.
DocsFor = Callable[[RunRecord], Docs | None]

# The sequential gate's section of report.json ({"sequential": {...}}) and its MLflow metrics.
SequentialExtra = tuple[dict[str, Any], dict[str, float]]


@dataclass(frozen=True)
class Outcome:
    """A decided comparison of `base` and `cand`."""

    comp: Comparison
    verdict: Verdict
    base: StoredRun
    cand: StoredRun
    cfg: CompareConfig
    extra: SequentialExtra | None = None  # set when the sequential gate decided
    # The paired questions' results (baseline, candidate): MLflow's per-question table
    results: tuple[Sequence[QuestionResult], Sequence[QuestionResult]] | None = None
    docs: Docs | None = None  # the questions' text, where the entry point could read the data

    @property
    def sequential(self) -> dict[str, Any] | None:
        """The sequential gate's section of report.json (its look, the questions used and saved, the
        anytime-valid interval), or None when the fixed-sample gate decided."""
        return self.extra[0]["sequential"] if self.extra else None

    @property
    def server(self) -> str | None:
        """The MLflow tracking server the runs' pages are on, for the report's links: the URI as
        given, else `MLFLOW_TRACKING_URI` (`store.locations.mlflow_uri`); None for a local store."""
        from mmlu_track.store.locations import mlflow_uri

        uri = mlflow_uri(self.cfg.tracking.mlflow_uri)
        return uri if uri.startswith(("http://", "https://")) else None

    @property
    def mode(self) -> str:
        """How it was decided: `gate`, `fewshot_gap`, or `sequential`."""
        return "sequential" if self.extra else self.cfg.mode


def questions_text(docs_for: DocsFor | None, run: StoredRun, mlflow: bool) -> Docs | None:
    """The run's questions' text where it is read (`docs_for`) and used (`mlflow`: only MLflow's
    table shows it; the data is not read again otherwise)."""
    return docs_for(run.record) if docs_for and mlflow and run.record else None
