"""`records.codec`: every record's JSON as the old hand-written code wrote it (`legacy`, frozen at
be1c9eb), read back equal, older documents still read, and a value not of its type refused in one
line naming its path in the document."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from mmlu_track.records import codec, protocol
from mmlu_track.records.annotations import AnnotatedScores, AnnotationSet, annotated_scores
from mmlu_track.records.codec import RecordError
from mmlu_track.records.protocol import EvalProtocol
from mmlu_track.records.results import QuestionResult, RotatedAnswer, aggregate
from mmlu_track.records.robustness import LetterBias, circular_scores, letter_bias
from mmlu_track.records.run import EarlyStop, HostInfo, RunRecord, Timing
from mmlu_track.records.stored import ShardWork, StoredRun
from mmlu_track.support.errors import MmluTrackError

from ..conftest import compose_eval, synthetic_record, synthetic_start
from . import legacy

SUBJECTS = ("anatomy", "astronomy", "virology")


def _results() -> list[QuestionResult]:
    """Circular questions of three subjects: valid and invalid answers, annotated and not."""
    out = []
    for n, subject in enumerate(SUBJECTS * 4):
        answer = RotatedAnswer((n + 1) % 4, (-1.0, -2.5, -0.25, -3.0))
        rotations = (answer, RotatedAnswer(None, None, "Z"), dataclasses.replace(answer, prediction=n % 4))
        margin = float("inf") if n == 2 else 0.5
        out.append(
            QuestionResult(
                subject, n, f"h{n}", 5 - n % 2, 100 + n, n == 3, (-1.0, -2.0, -0.5, float("-inf")),
                None if n % 3 else "B", None if n == 5 else n % 4, (n + 1) % 4, margin,
                "logits" if n % 2 else None, rotations, (None, "ok", "expert")[n % 3],
            )
        )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def records() -> dict[str, Any]:
    """One record of every kind (a run record twice: bare, and with every optional part)."""
    results = _results()
    scores = aggregate(results)
    cfg = compose_eval(["model=tiny", "scoring.choice_order=circular", "k=3"])
    bare = synthetic_record("a" * 64, compose_eval(["model=tiny"]), "m", "f" * 64, scores)
    sets = AnnotationSet("redux", "e" * 64, 12, 9, 2, 1, 1, ("anatomy: what is…",))
    start = synthetic_start(cfg, "m", "f" * 64, len(results))
    start = dataclasses.replace(
        start,
        model=dataclasses.replace(start.model, server='{"version": "1"}'),
        data=dataclasses.replace(start.data, path="/data/mmlu", annotations=sets),
        host=HostInfo("node1", "Linux", ("mmlu_track", "k=3"), "4 (cores)"),
        sweep="multirun/2026",
        versions={"python": "3.11.7", "torch": None},
    )
    full = RunRecord(
        "b" * 64, start, {3: 10, 2: 2}, 1, 2, 3, Timing(1.5, 2.25, 10.125, 1.2, 1, 999, 14.0, 12, 1, 0.5),
        scores, circular_scores(results), letter_bias(results), annotated_scores(results),
    )  # fmt: skip
    return {
        "protocol": start.protocol,
        "protocol_as_given": bare.start.protocol,
        "question": results[2],
        "question_invalid": results[5],
        "accuracies": scores,
        "annotation_set": sets,
        "annotated": annotated_scores(results),
        "annotated_none_clean": AnnotatedScores({"not annotated": 3}, None),
        "circular": circular_scores(results),
        "letter_bias": letter_bias(results),
        "letter_bias_as_given": letter_bias([dataclasses.replace(r, rotations=()) for r in results]),
        "run_bare": bare,
        "run_full": full,
        "early_stop": EarlyStop(2, 5, 300, 1000, "regression", "the bound crossed", "c" * 64),
        "shard_work": ShardWork(1.5, 2.0, 3.25, 7.0, 10, 1000, 1, 0, 5, 1, 0.5),
        "shard_work_none": ShardWork.none(),
    }


KINDS = [
    "protocol", "protocol_as_given", "question", "question_invalid", "accuracies", "annotation_set",
    "annotated", "annotated_none_clean", "circular", "letter_bias", "letter_bias_as_given", "run_bare",
    "run_full", "early_stop", "shard_work", "shard_work_none",
]  # fmt: skip


def _stored(record: Any) -> dict[str, Any]:
    """What a store reads back: the record's JSON text, parsed."""
    doc: dict[str, Any] = json.loads(json.dumps(record.to_json()))
    return doc


@pytest.mark.parametrize("kind", KINDS)
def test_to_json_writes_what_the_old_code_wrote(records: dict[str, Any], kind: str) -> None:
    record = records[kind]
    new, old = record.to_json(), legacy.WRITERS[type(record)](record)
    assert json.dumps(new) == json.dumps(old)  # the same keys, order and values, 0 as 0 and 0.0 as 0.0
    assert new == old  # and the same Python values (tuples where they were tuples)


@pytest.mark.parametrize("kind", KINDS)
def test_every_record_reads_back_equal_as_the_old_code_read_it(records: dict[str, Any], kind: str) -> None:
    record = records[kind]
    doc = _stored(record)
    assert type(record).from_json(doc) == record
    assert type(record).from_json(copy.deepcopy(doc)) == legacy.READERS[type(record)](doc)


def test_a_rotated_answer_reads_as_stored_with_its_question() -> None:
    for answer in (RotatedAnswer(2, (-1.0, -2.0, -3.0, -4.0)), RotatedAnswer(None, None, "no letter")):
        doc = json.loads(json.dumps(dataclasses.asdict(answer)))  # as store/rows.py writes it
        assert RotatedAnswer.from_json(doc) == answer == legacy.rotated_from_json(doc)
    assert RotatedAnswer.from_json({"prediction": 1}) == RotatedAnswer(1)


def _at(doc: Any, path: str) -> tuple[Any, Any]:
    """The dict or list holding `path` (dotted, list items by index) in `doc`, and its last key."""
    *parents, key = (int(p) if p.isdigit() else p for p in path.split("."))
    for p in parents:
        doc = doc[p]
    return doc, key


def _without(doc: dict[str, Any], *paths: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for path in paths:
        node, key = _at(out, path)
        del node[key]
    return out


RUN_ADDED = (  # the run record's fields added since its first version
    "host.threads", "sweep", "timing.requests", "timing.abandoned_requests", "timing.abandoned_s",
    "model.server", "data.annotations", "circular", "letter_bias", "annotated",
)  # fmt: skip
OLDER = [
    # fields added since: the keys absent (the old reader took each's default, or None)
    ("run_full", RUN_ADDED),
    ("run_bare", ("sweep", "host.threads")),
    ("protocol", ("chat", "extract", "choice_order")),
    ("question", ("rotations", "annotation")),
    ("annotation_set", ("conflicts", "unmatched_examples")),
    ("annotated", ("clean",)),
    ("shard_work", ("requests", "abandoned", "abandoned_s")),
    # derived keys, as written: not read
    ("letter_bias", ()),
    ("question_invalid", ("correct", "predicted_letter", "gold_letter")),
]


@pytest.mark.parametrize(("kind", "absent"), OLDER)
def test_documents_older_versions_wrote_read_as_before(
    records: dict[str, Any], kind: str, absent: tuple[str, ...]
) -> None:
    record = records[kind]
    doc = _without(_stored(record), *absent)
    assert type(record).from_json(copy.deepcopy(doc)) == legacy.READERS[type(record)](doc)


def test_keys_the_old_readers_ignored_are_ignored(records: dict[str, Any]) -> None:
    run = _stored(records["run_full"])
    run["prompt"]["note"] = run["scoring"]["note"] = run["host"]["user"] = run["scores"]["note"] = 1
    run["circular"] = {**run["circular"], "note": 1}
    proto = {**records["protocol"].to_json(), "a_later_setting": "x"}
    for cls, doc in ((RunRecord, run), (EvalProtocol, proto)):
        assert cls.from_json(copy.deepcopy(doc)) == legacy.READERS[cls](doc)


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        node, key = _at(doc, path)
        node[key] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        node, key = _at(doc, path)
        del node[key]

    return change


INT = "Input should be a valid integer"
UNPARSED = "unable to parse string as an integer"


REFUSED = [
    (_set("scores.micro.n", "many"), "scores.micro.n: " + INT),
    (_drop("run_id"), "run_id: Field required"),
    (_set("scores.micro.acc", "high"), "scores.micro.acc: Input should be a valid number"),
    (_set("scores.subjects.anatomy.correct", 2.5), "scores.subjects.anatomy.correct: " + INT),
    (_set("scores.micro.n", "12"), "scores.micro.n: " + INT),
    (_set("scores.micro.extra", 1), "scores.micro.extra: Unexpected keyword argument"),
    (_set("prompt.shots_used", {"five": 3}), f"prompt.shots_used.five.[key]: {INT}, {UNPARSED}"),
    (_set("prompt.truncated", None), "prompt.truncated: " + INT),
    (_set("timing.lunch_s", 1.0), "timing.lunch_s: Unexpected keyword argument"),
    (_set("letter_bias.gold", [1, 2, "three", 4]), "letter_bias.gold.2: " + INT),
    (_set("host.argv", "mmlu_track k=3"), "host.argv: Input should be a valid array"),
    (_set("model.add_bos", 1), "model.add_bos: Input should be a valid boolean"),
    (_set("data.annotations.rows", "12"), "data.annotations.rows: " + INT),
    (_set("circular.consistency.macro", None), "circular.consistency.macro: Input should be an object"),
    (_set("annotated.counts.ok", "3"), "annotated.counts.ok: " + INT),
    (_set("seeds.python", None), "seeds.python: " + INT),
]  # fmt: skip


@pytest.mark.parametrize(("change", "why"), REFUSED, ids=[why.split(":")[0] for _, why in REFUSED])
def test_a_stored_run_record_of_the_wrong_type_is_refused_naming_the_field(
    records: dict[str, Any], change: Callable[[dict[str, Any]], None], why: str
) -> None:
    doc = _stored(records["run_full"])
    change(doc)
    with pytest.raises(RecordError) as err:
        RunRecord.from_json(doc)
    assert str(err.value) == f"unreadable run record: {why}"


def test_the_first_failure_is_named_and_the_others_counted(records: dict[str, Any]) -> None:
    doc = _stored(records["run_full"])
    doc["scores"]["micro"]["n"] = doc["timing"]["total_s"] = "x"
    del doc["run_id"]
    with pytest.raises(RecordError, match=r"^unreadable run record: run_id: Field required \(and 2 more\)$"):
        RunRecord.from_json(doc)


def test_settings_and_schema_are_refused_as_before(records: dict[str, Any]) -> None:
    doc = _stored(records["run_full"])
    doc["config"]["k"] = -1
    with pytest.raises(RecordError, match=r"^unreadable run record: config: \S"):
        RunRecord.from_json(doc)
    with pytest.raises(RecordError, match=r"^record schema 2, this version reads 1$"):
        RunRecord.from_json({**doc, "schema_version": 2})


OTHERS = [
    (EvalProtocol, "protocol", _set("k", "5"), "unreadable protocol record: k: " + INT),
    (EvalProtocol, "protocol", _drop("questions"), "unreadable protocol record: questions: Field required"),
    (QuestionResult, "question", _drop("gold"), "unreadable question result: gold: Field required"),
    (QuestionResult, "question", _set("logprobs", [-1.0, "minus two"]),
     "unreadable question result: logprobs.1: Input should be a valid number"),
    (QuestionResult, "question", _set("rotations.1.prediction", "B"),
     "unreadable question result: rotations.1.prediction: " + INT),
    (AnnotationSet, "annotation_set", _set("source", None),
     "unreadable annotation set: source: Input should be a valid string"),
    (LetterBias, "letter_bias", _drop("letter_following"),
     "unreadable letter bias: letter_following: Field required"),
    (EarlyStop, "early_stop", _set("extra", 1),
     "unreadable early-stop record: extra: Unexpected keyword argument"),
    (ShardWork, "shard_work", _set("scored", "3"),
     "unreadable shard work record: scored: " + INT),
]  # fmt: skip


@pytest.mark.parametrize(("cls", "kind", "change", "why"), OTHERS, ids=[o[3] for o in OTHERS])
def test_every_record_refuses_a_wrong_value_naming_the_field(
    records: dict[str, Any], cls: type[Any], kind: str, change: Callable[[dict[str, Any]], None], why: str
) -> None:
    doc = _stored(records[kind])
    change(doc)
    with pytest.raises(RecordError) as err:
        cls.from_json(doc)
    assert str(err.value) == why


def test_the_store_names_the_run_and_the_field(records: dict[str, Any]) -> None:
    doc = _stored(records["run_full"])
    doc["scores"]["micro"]["n"] = "many"
    columns = {f.name: None for f in dataclasses.fields(StoredRun)}  # only these two are read
    row = StoredRun(**columns | {"id": "r9", "record_json": json.dumps(doc)})
    with pytest.raises(RecordError, match=r"^run r9: unreadable run record: scores\.micro\.n: Input should"):
        _ = row.record


def test_one_error_kind_callers_catch() -> None:
    assert protocol.RecordError is RecordError
    assert issubclass(RecordError, MmluTrackError)
    with pytest.raises(RecordError, match=r"^unreadable early-stop record: not a JSON document"):
        EarlyStop.from_json({"look": object()})


def test_infinities_and_argv_bytes_read_back(records: dict[str, Any]) -> None:
    question = records["question"]
    assert question.margin == float("inf")
    assert QuestionResult.from_json(_stored(question)) == question
    run = records["run_full"]
    # an argument Python decoded with surrogateescape (bytes not UTF-8): json writes it, reads it back
    host = HostInfo("h", "p", ("k=\udcff",))
    run = dataclasses.replace(run, start=dataclasses.replace(run.start, host=host))
    assert RunRecord.from_json(_stored(run)) == run
    doc = _stored(run)
    doc["truncated"] = doc["prompt"]["truncated"] = "1"
    with pytest.raises(RecordError, match=r"prompt\.truncated: " + INT):
        RunRecord.from_json(doc)


def test_an_adapter_is_built_once_per_record_class(records: dict[str, Any]) -> None:
    RunRecord.from_json(_stored(records["run_bare"]))
    built = dict(codec._CODECS)
    RunRecord.from_json(_stored(records["run_full"]))
    records["run_full"].to_json()
    assert all(codec._CODECS[cls] is found for cls, found in built.items())
