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
        run(tiny_run_cfg(db, model="tiny"), tmp_path / "out", display=QUIET)
    line = str(err.value)
    assert line.startswith("abstract_algebra question ")
    assert "the log-prob of A is nan, which no probability has" in line
    assert "run the same command to resume" in line
    store = SqlStore(db)
    (stored,) = store.runs()
    assert stored.status == "failed"
    assert store.question_results(stored.id) == []  # nothing scored from a NaN


@pytest.mark.parametrize(
    ("text", "options", "expected"),
    [
        ("so 2+2 = 4. The answer is (B).", 10, (1, "answer is")),
        ("The answer is C because", 4, (2, "answer is")),
        ("first answer is (A), no wait, the answer is (D)", 4, (0, "answer is")),  # the first match
        ("Working...\nAnswer: E\nmore text", 10, (4, "answer:")),
        ("answer:   G", 10, (6, "answer:")),
        ("It cannot be A or B, so it is J.", 10, (9, "last letter")),
        ("A\nthen\nC", 4, (2, "last letter")),  # across lines: the last standalone letter
        ("no letter here, only words like Apple", 4, (None, "none")),
        ("The answer is (H).", 4, (None, "beyond")),  # a letter the question does not have: wrong
        ("", 3, (None, "none")),
    ],
)
def test_a_chain_of_thought_is_read_by_the_official_rules_in_order(
    text: str, options: int, expected: tuple[int | None, str]
) -> None:
    from mmlu_track.eval.answers import extract

    assert extract(text, options) == expected


def test_wherever_lm_evals_one_regex_matches_the_cascade_reads_what_it_reads() -> None:
    import re

    from mmlu_track.eval.answers import extract

    lm_eval = re.compile(r"answer is \(?([ABCDEFGHIJ])\)?")  # mmlu_pro 3.1's custom-extract filter
    texts = ["The answer is (F).", "answer is J", "Thus the answer is (C) and not D", "the answer is: B"]
    for text in texts:
        found = lm_eval.search(text)
        got, rule = extract(text, 10)
        if found:
            assert (got, rule) == ("ABCDEFGHIJ".index(found.group(1)), "answer is")
        else:
            assert rule != "answer is"


def test_a_failed_extraction_guess_is_seeded_by_the_question_alone() -> None:
    from mmlu_track.eval.answers import guess

    picks = [guess(12345, "math", i, 10) for i in range(200)]
    assert picks == [guess(12345, "math", i, 10) for i in range(200)]
    assert set(picks) == set(range(10))
    assert picks != [guess(1, "math", i, 10) for i in range(200)]
    assert all(guess(7, "law", i, 3) < 3 for i in range(50))
