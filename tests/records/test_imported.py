"""records/imported.py: an imported run's origin kept in its start record, through results.json and
back; the protocol of lm-eval's own prompts; a native run's record unchanged (no `imported` key)."""

from __future__ import annotations

import dataclasses

from mmlu_track.records.imported import OWN_PROMPTS, Imported
from mmlu_track.records.results import QuestionResult, aggregate
from mmlu_track.records.run import RunRecord

from ..conftest import compose_eval, synthetic_record

ORIGIN = Imported(
    tool="lm-eval", results_file="/out/m/results_2026-12-06T09-02-04.json", sha256="ab" * 32,
    prompts=f"{OWN_PROMPTS}:0123456789abcdef", model_args={"pretrained": "org/m"},
    versions={"lm_eval": "0.4.13"}, limit=4.0, date="2026-12-06T09:02:04+00:00", chat_template_sha=None,
    fewshot_as_multiturn=False, system_instruction=None, pinned=False,
)  # fmt: skip


def test_an_imported_runs_origin_round_trips_and_its_own_prompts_are_their_protocol() -> None:
    rows = [QuestionResult("anatomy", i, "h", 0, 10, False, (-1.0, -2.0, -2.0, -2.0), None, 0, i % 2, 1.0)
            for i in range(4)]  # fmt: skip
    native = synthetic_record("r" * 32, compose_eval(["model=tiny"]), "m", "f" * 64, aggregate(rows))
    assert "imported" not in native.to_json()  # a native run's document as before imports
    assert native.start.protocol.formulation == native.start.config.formulation
    record = dataclasses.replace(native, start=dataclasses.replace(native.start, imported=ORIGIN))
    back = RunRecord.from_json(record.to_json())
    assert back.start.imported == ORIGIN
    assert back.start.protocol.formulation == OWN_PROMPTS  # compared only with the same prompts
    assert ORIGIN.own_prompts
    said = "imported from lm-eval on 2026-12-06 (lm-eval:0123456789abcdef prompts, --limit 4)"
    assert said in ORIGIN.summary()
    harness = dataclasses.replace(ORIGIN, prompts="harness")
    assert not harness.own_prompts
