"""pipeline/prepare.py: a run ready to be scored (the plan, the model, every prompt rendered to fit,
its start record and identity) before anything is recorded; the same settings, the same identity;
a prompt that cannot fit refused before any work."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mmlu_track.eval.plan import TruncationError
from mmlu_track.pipeline.prepare import Origin, prepare
from mmlu_track.pipeline.resolve import resolve

from ..conftest import tiny_run_cfg


def test_a_prepared_run_holds_its_prompts_its_start_and_its_identity(sqlite_url: str) -> None:
    cfg = tiny_run_cfg(sqlite_url, "subjects=[anatomy,virology]", "limit=2", "k=1")
    command = ["python", "-m", "mmlu_track", "tracking.db_url=postgresql://u:pw-31@h/db"]
    prep = prepare(cfg, Origin(command=command), resolve(cfg))
    again = prepare(cfg, Origin(), resolve(cfg))
    other_k = prepare(replace(cfg, k=0), Origin(), resolve(cfg))
    try:
        assert [q.subject for q in prep.plan.all_questions] == ["anatomy"] * 2 + ["virology"] * 2
        assert {s: len(ps) for s, ps in prep.rendered.items()} == {"anatomy": 2, "virology": 2}
        asked = [p for ps in prep.rendered.values() for p in ps]
        assert all(p.text.endswith("Answer:") and p.shots_used == 1 for p in asked)
        assert prep.start.data.n_questions == 4
        assert prep.start.example_prompt == prep.rendered["anatomy"][0].text
        assert prep.start.config == cfg  # as asked
        assert prep.start.host.argv[-1] == "tracking.db_url=postgresql://u:***@h/db"
        assert prep.answer_lead == " "
        assert again.identity == prep.identity
        assert other_k.identity != prep.identity
    finally:
        for p in (prep, again, other_k):
            p.lm.close()


def test_a_prompt_that_cannot_fit_is_refused_before_any_work(sqlite_url: str) -> None:
    cfg = tiny_run_cfg(sqlite_url, "subjects=[anatomy]", "limit=1", "k=0", "max_length=16")
    refused = r"^1 of 1 prompts do not fit the model's context \(16 tokens\) even with 0 shots"
    with pytest.raises(TruncationError, match=refused) as e:
        prepare(cfg, Origin(), resolve(cfg))
    assert e.value.before_any_work
