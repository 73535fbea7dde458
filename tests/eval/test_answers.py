"""How a score becomes an answer (`eval/answers.py`), and the scores no answer may come from: a
NaN or positive log-prob is refused, never scored, whichever backend gave it (issue 39)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from mmlu_track.eval import models
from mmlu_track.eval.answers import LOGPROB_TOLERANCE, check
from mmlu_track.eval.backend import ModelError, PromptError, Score
from mmlu_track.pipeline.evaluate import QUIET, run
from mmlu_track.store.sql import SqlStore

from ..conftest import tiny_run_cfg

FINE = (-1.2, -0.3, -2.0, -5.0)


@pytest.mark.parametrize(
    ("bad", "shown"),
    [
        (math.nan, "nan"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (3.0, "3.0"),
        (2 * LOGPROB_TOLERANCE, "0.0002"),
    ],
)
def test_an_impossible_log_prob_is_refused_at_its_position(bad: float, shown: str) -> None:
    scores = [Score(0, FINE), Score(None, (-1.0, -1.0, bad, -1.0))]
    with pytest.raises(PromptError, match=f"the log-prob of C is {shown}, which no probability has") as err:
        check(scores)
    assert err.value.position == 1


def test_rounding_at_zero_and_generations_pass() -> None:
    check([Score(0, (LOGPROB_TOLERANCE / 2, -1.0, -2.0, -3.0)), Score(0, (0.0, -9.0, -9.0, -9.0))])
    check([Score(1, generated="B"), Score(None, generated="?")])  # no log-probs: nothing to check


def test_a_broken_weight_refuses_its_question_in_one_line_and_stores_nothing_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, the same fault a broken weight file (or an fp16 overflow) makes: NaN logits."""
    real = models.load_model

    def poisoned(cfg: Any) -> Any:
        lm = real(cfg)
        with torch.no_grad():
            lm.model.get_output_embeddings().weight.fill_(float("nan"))
        return lm

    monkeypatch.setattr(models, "load_model", poisoned)
    db = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(ModelError) as err:
        run(tiny_run_cfg(db), tmp_path / "out", display=QUIET)
    line = str(err.value)
    assert line.startswith("abstract_algebra question ")
    assert "the log-prob of A is nan, which no probability has" in line
    assert "run the same command to resume" in line
    store = SqlStore(db)
    (stored,) = store.runs()
    assert stored.status == "failed"
    assert store.question_results(stored.id) == []  # nothing scored from a NaN
