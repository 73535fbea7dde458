"""records/results.py: accuracy and its standard error, aggregation by subject, category, macro and
micro, the predictions' JSONL read back; and a run's name (records/run.py) telling runs apart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mmlu_track.records.results import Accuracy, QuestionResult, aggregate, table, write_jsonl


def _r(subject: str, index: int, correct: bool, valid: bool = True) -> QuestionResult:
    gold = 1
    prediction = (gold if correct else 2) if valid else None
    return QuestionResult(
        subject=subject,
        index=index,
        prompt_hash="h",
        shots_used=5,
        n_tokens=10,
        truncated=False,
        logprobs=(-1.0, -0.5, -2.0, -3.0) if valid else None,
        generated=None if valid else "x",
        prediction=prediction,
        gold=gold,
        margin=0.5 if valid else None,
    )


def test_accuracy_and_stderr() -> None:
    a = Accuracy.of([True, True, False, False])
    assert (a.n, a.correct, a.acc) == (4, 2, 0.5)
    # sample sd (ddof=1) / sqrt(n): sqrt(0.25 * 4/3) / 2
    assert a.stderr == pytest.approx(math.sqrt(1 / 3) / 2)
    assert Accuracy.of([True]).stderr is None


def test_aggregate_subjects_categories_macro_micro() -> None:
    results = (
        [_r("anatomy", i, i < 1) for i in range(4)]  # 1/4, other
        + [_r("virology", i, i < 2) for i in range(2)]  # 2/2, other
        + [_r("college_physics", i, i < 3) for i in range(6)]  # 3/6, STEM
        + [_r("college_physics", 6, False, valid=False)]  # invalid counts wrong: 3/7
    )
    s = aggregate(results)
    assert s.subjects["anatomy"].acc == 0.25
    assert s.subjects["virology"].acc == 1.0
    assert s.subjects["college_physics"].acc == pytest.approx(3 / 7)
    assert s.categories["STEM"].acc == pytest.approx(3 / 7)
    # category = all its questions pooled (3/6), not the mean of its subjects (0.625)
    assert s.categories["other (business, health, misc.)"].acc == pytest.approx(3 / 6)
    assert s.subcategories["health"].acc == pytest.approx(3 / 6)
    assert s.subcategories["physics"].n == 7
    assert s.macro.acc == pytest.approx((0.25 + 1.0 + 3 / 7) / 3)
    assert s.micro.acc == pytest.approx(6 / 13)
    assert s.micro.n == 13
    variances = [a.stderr**2 for a in s.subjects.values() if a.stderr is not None]
    assert s.macro.stderr == pytest.approx(math.sqrt(sum(variances)) / 3)
    assert s.invalid == 1
    assert "macro average" in table(s)
    assert "1 answers were not one of their" in table(s)


def test_aggregate_refuses_nothing() -> None:
    with pytest.raises(ValueError, match="no results"):
        aggregate([])


def test_jsonl_round_trip(tmp_path: Path) -> None:
    results = [_r("anatomy", 0, True), _r("anatomy", 1, False, valid=False)]
    write_jsonl(tmp_path / "p.jsonl", results)
    lines = (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()
    assert [QuestionResult.from_json(json.loads(line)) for line in lines] == results


def test_run_names_tell_model_versions_and_settings_apart() -> None:
    """Two versions of a random model were named alike (the sample's seed was the only seed in
    the name), and a calibration run differed only past the runs table's cut (issue 42)."""
    from ..conftest import compose_eval, synthetic_start

    def name(*overrides: str) -> str:
        return synthetic_start(compose_eval(["experiment=smoke", *overrides])).name

    assert name("model.tiny_seed=1") != name("model.tiny_seed=2")
    assert name("model.tiny_seed=1").startswith("m@seed1-k2-logprob")
    assert name("scoring.calibration=mean").startswith("m@seed0-k2-logprob-cal-mean")
    assert name("seed=7").endswith("limit3-sample7")
    assert name().endswith("-float32-limit3")  # the default sample seed is not repeated
    assert "circular" in name("scoring.choice_order=circular")
    # batching changes no result, but a noise check's two runs differ only there
    assert name("batch_size=2", "batch_tokens=null").endswith("-float32-bs2-btnone-limit3")
