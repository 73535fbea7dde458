"""imports/lm_eval_fields.py: what an lm-eval results file records beside its scores, each value read
as lm-eval writes it, or refused in one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmlu_track.eval.data import DataError
from mmlu_track.imports import lm_eval_fields as fields


def test_model_args_as_lm_eval_records_them_a_dict_or_the_string_it_was_given() -> None:
    assert fields.model_args({"pretrained": "/m", "dtype": "float32"}) == {
        "pretrained": "/m",
        "dtype": "float32",
    }
    assert fields.model_args("pretrained=/m, revision=abc,") == {"pretrained": "/m", "revision": "abc"}
    assert fields.model_args(None) == {}


@pytest.mark.parametrize("raw", [0, -3, float("nan"), True, "10"])
def test_a_limit_that_is_no_number_of_questions_is_one_line(raw: object) -> None:
    with pytest.raises(DataError, match=r"^r.json: config.limit .* is not a number of questions$"):
        fields.limit(raw, Path("r.json"))
    assert fields.limit(None, Path("r.json")) is None
    assert fields.limit(0.5, Path("r.json")) == 0.5


def test_dates_texts_and_special_tokens_keep_only_what_lm_eval_wrote_as_such() -> None:
    assert fields.date(1764979200) == "2025-12-06T00:00:00+00:00"
    assert fields.date(float("nan")) is None
    assert fields.date("yesterday") is None
    assert fields.text({"chat_template": ""}, "chat_template") is None
    assert fields.text({"chat_template": "{{ x }}"}, "chat_template") == "{{ x }}"
    doc = {"tokenizer_bos_token": ["<s>", 1], "tokenizer_eos_token": [None, 2], "tokenizer_pad_token": "x"}
    assert fields.special_tokens(doc) == {"bos_token": "<s>"}
