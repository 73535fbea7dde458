"""store/mirror.py: save to the SQL store first (its failure is the command's), then mirror to
MLflow and link the copy into the row; an MLflow that cannot be used costs one warning saying where
the record is kept, never the record."""

from __future__ import annotations

import pytest

from mmlu_track.store.db import StoreError
from mmlu_track.store.mirror import save_then_mirror
from mmlu_track.store.mlflow import Logged, MlflowUnavailable


def test_saved_first_then_mirrored_and_linked(capsys: pytest.CaptureFixture[str]) -> None:
    steps: list[str] = []
    logged = Logged("run-1", "http://mlflow/#/run-1")

    def mirror() -> Logged:
        steps.append("mirror")
        return logged

    got = save_then_mirror(lambda: steps.append("save"), mirror, lambda x: steps.append(f"link {x.id}"), "")
    assert got == logged
    assert steps == ["save", "mirror", "link run-1"]
    steps.clear()
    assert save_then_mirror(lambda: steps.append("save"), None, lambda x: steps.append("link"), "") is None
    assert steps == ["save"]  # tracking.mlflow=false: saved only
    assert capsys.readouterr().err == ""


def test_an_unusable_mlflow_costs_a_warning_and_a_failed_save_everything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    steps: list[str] = []

    def down() -> Logged:
        raise MlflowUnavailable("MLflow server http://h:5000 is unreachable: refused")

    def link(x: Logged) -> None:
        steps.append("link")

    kept = "; the comparison is kept in the SQL store"
    assert save_then_mirror(lambda: steps.append("save"), down, link, kept) is None
    assert steps == ["save"]
    assert capsys.readouterr().err == (
        "mmlu_track: warning: MLflow server http://h:5000 is unreachable: refused; the comparison is kept "
        "in the SQL store\n"
    )

    def broken() -> None:
        raise StoreError("the results database is read-only")

    def mirror() -> Logged:
        steps.append("mirror")
        return Logged("x", None)

    with pytest.raises(StoreError):
        save_then_mirror(broken, mirror, link, kept)
    assert steps == ["save"]  # nothing mirrored after a failed save

    def bug() -> Logged:
        raise KeyError("a bug")

    with pytest.raises(KeyError):  # not MLflow's failure: never a warning
        save_then_mirror(lambda: None, bug, link, kept)
