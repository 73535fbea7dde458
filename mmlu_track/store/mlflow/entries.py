"""What the other rooms hand the MLflow room: typed records, never a tag, a page or a client.

The gate hands a `ComparisonRun` (a verdict, or a few-shot gap), the noise command a `NoiseRun`, the
gate's promotion a `Promotion`; the room decides how each is written (its tags, its description
field, its colours, its tables) and answers with a `Logged`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mmlu_track.records.results import Docs, QuestionResult


@dataclass(frozen=True)
class Target:
    """Where a record goes: the tracking URI (None: MLflow's default) and the experiment's name."""

    uri: str | None
    experiment: str


@dataclass(frozen=True)
class PairedQuestions:
    """Both runs' answers to the questions a comparison paired, for its per-question table."""

    baseline: Sequence[QuestionResult]
    candidate: Sequence[QuestionResult]
    metric: str  # `gate.metric`: what a question's change is read on (accuracy or circular)
    docs: Docs | None = None  # the questions' text and choices, where the data could be read


@dataclass(frozen=True)
class ComparisonRun:
    """A decided comparison as its own MLflow run.

    `verdict`: pass | regression | inconclusive | analysis (a few-shot gap: no verdict; the
    candidate's run is then left as it was). `description`: the run page's text, its first line
    what the runs table shows. `candidate`: the candidate's MLflow run id and the line its page
    shows for its latest gate, when that run is in MLflow.
    """

    target: Target
    name: str
    verdict: str
    description: str
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    files: Sequence[Path]
    candidate: tuple[str, str] | None = None
    paired: PairedQuestions | None = None


@dataclass(frozen=True)
class NoiseRun:
    """A noise measurement as its own MLflow run: `runs` names each evaluation it paired (variant
    name -> run id), `metrics` its figures (any name: the room makes them valid MLflow keys)."""

    target: Target
    name: str
    noise_id: str
    description: str
    runs: Mapping[str, str]
    metrics: Mapping[str, float]
    files: Sequence[Path] = field(default_factory=tuple)


@dataclass(frozen=True)
class Promotion:
    """Point `model@alias` in MLflow's registry at a new version for the run `run_id` (the model
    registered by reference: `source` is where its weights are; nothing is copied)."""

    uri: str | None
    model: str
    alias: str
    run_id: str
    source: str


@dataclass(frozen=True)
class Logged:
    """A record's MLflow run: its id, and its page where the tracking store has a UI."""

    id: str
    url: str | None
