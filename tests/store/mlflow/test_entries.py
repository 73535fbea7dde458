"""store/mlflow/entries.py: what the other rooms hand the MLflow room are frozen, typed records that
name what is logged, never how: no tag, page, client or MLflow type in any of them."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from mmlu_track.store.mlflow import entries
from mmlu_track.store.mlflow.entries import (
    ComparisonRun,
    Logged,
    NoiseRun,
    PairedQuestions,
    Promotion,
    Target,
)

RECORDS = (Target, PairedQuestions, ComparisonRun, NoiseRun, Promotion, Logged)


def _types(hint: object) -> set[type]:
    """Every class a type hint names (`Sequence[QuestionResult] | None`: Sequence, QuestionResult, None)."""
    found = {hint} if isinstance(hint, type) else set()
    origin = typing.get_origin(hint)
    if isinstance(origin, type):
        found.add(origin)
    return found.union(*(_types(arg) for arg in typing.get_args(hint)))


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_a_record_handed_to_the_room_names_no_tag_page_or_client(record: type) -> None:
    hints = typing.get_type_hints(record, vars(entries))
    for field in dataclasses.fields(record):
        assert not any(word in field.name for word in ("tag", "page", "client", "experiment_id")), field.name
        mlflows = [t for t in _types(hints[field.name]) if t.__module__.split(".")[0] == "mlflow"]
        assert not mlflows, field.name
    assert record.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_the_optional_parts_default_to_nothing() -> None:
    target = Target(None, "mmlu_track_compare")
    run = ComparisonRun(target, "pass: m", "pass", "PASS", params={}, metrics={}, files=())
    assert (run.candidate, run.paired) == (None, None)
    noise = NoiseRun(target, "noise m", "n" * 32, "", runs={}, metrics={})
    assert tuple(noise.files) == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        noise.name = "other"  # type: ignore[misc]
