"""The hand-written `to_json` / `from_json` pairs as they were before `records.codec` (commit be1c9eb),
copied as functions (a nested record's old `to_json` inlined as what it was, `asdict`): what the
codec's output and reading are compared with, so the comparison still means something now that the
old code is gone from the package."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from mmlu_track.records.annotations import AnnotatedScores, AnnotationSet
from mmlu_track.records.protocol import EvalProtocol, RecordError
from mmlu_track.records.results import Accuracies, Accuracy, QuestionResult, RotatedAnswer
from mmlu_track.records.robustness import CircularScores, LetterBias
from mmlu_track.records.run import (
    SCHEMA_VERSION,
    DataInfo,
    EarlyStop,
    HostInfo,
    ModelInfo,
    RunRecord,
    RunStart,
    Timing,
)
from mmlu_track.records.stored import ShardWork
from mmlu_track.settings.checks import eval_config_from_dict
from mmlu_track.settings.config import to_dict
from mmlu_track.settings.subjects import LETTERS
from mmlu_track.settings.typed import ConfigError


def protocol_to_json(self: EvalProtocol) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    if out["choice_order"] == "as_given":
        out.pop("choice_order")
    if out["benchmark"] == "mmlu":  # the field came with MMLU-Pro: an MMLU run writes what it wrote before
        out.pop("benchmark")
    return out


def protocol_from_json(doc: dict[str, Any]) -> EvalProtocol:
    names = {f.name for f in dataclasses.fields(EvalProtocol)}
    try:
        return EvalProtocol(**{k: v for k, v in doc.items() if k in names})
    except TypeError as err:
        raise RecordError(f"unreadable protocol record: {err}") from err


def rotated_from_json(doc: dict[str, Any]) -> RotatedAnswer:
    lp = doc.get("logprobs")
    return RotatedAnswer(
        doc["prediction"], (lp[0], lp[1], lp[2], lp[3]) if lp else None, doc.get("generated")
    )


def question_to_json(self: QuestionResult) -> dict[str, Any]:
    rec = asdict(self)
    rec["correct"] = self.correct
    rec["predicted_letter"] = LETTERS[self.prediction] if self.prediction is not None else None
    rec["gold_letter"] = LETTERS[self.gold]
    return rec


def question_from_json(rec: dict[str, Any]) -> QuestionResult:
    fields = {k: rec[k] for k in QuestionResult.__dataclass_fields__ if k not in ("rotations", "annotation")}
    fields["annotation"] = rec.get("annotation")
    if fields["logprobs"] is not None:
        fields["logprobs"] = tuple(fields["logprobs"])
    rotations = tuple(rotated_from_json(a) for a in rec.get("rotations") or ())
    return QuestionResult(**fields, rotations=rotations)


def accuracies_from_json(raw: dict[str, Any]) -> Accuracies:
    def table(d: dict[str, Any]) -> dict[str, Accuracy]:
        return {k: Accuracy(**v) for k, v in d.items()}

    return Accuracies(
        subjects=table(raw["subjects"]),
        subcategories=table(raw["subcategories"]),
        categories=table(raw["categories"]),
        macro=Accuracy(**raw["macro"]),
        micro=Accuracy(**raw["micro"]),
        invalid=raw["invalid"],
    )


def annotation_set_to_json(self: AnnotationSet) -> dict[str, Any]:
    return {**asdict(self), "unmatched_examples": list(self.unmatched_examples)}


def annotation_set_from_json(doc: dict[str, Any]) -> AnnotationSet:
    return AnnotationSet(**{**doc, "unmatched_examples": tuple(doc.get("unmatched_examples") or ())})


def annotated_to_json(self: AnnotatedScores) -> dict[str, Any]:
    return {"counts": dict(self.counts), "clean": asdict(self.clean) if self.clean else None}


def annotated_from_json(doc: dict[str, Any]) -> AnnotatedScores:
    clean = doc.get("clean")
    return AnnotatedScores(
        {str(k): int(v) for k, v in doc["counts"].items()}, accuracies_from_json(clean) if clean else None
    )


def circular_to_json(self: CircularScores) -> dict[str, Any]:
    return {k: asdict(v) for k, v in vars(self).items()}


def circular_from_json(raw: dict[str, Any]) -> CircularScores:
    return CircularScores(
        **{k: accuracies_from_json(raw[k]) for k in ("accuracy", "mean_rotation", "consistency")}
    )


def letter_bias_to_json(self: LetterBias) -> dict[str, Any]:
    return {**asdict(self), "recall": list(self.recall)}


def letter_bias_from_json(raw: dict[str, Any]) -> LetterBias:
    def four(key: str) -> tuple[int, int, int, int]:
        a, b, c, d = (int(v) for v in raw[key])
        return a, b, c, d

    return LetterBias(
        four("predicted"), four("gold"), four("correct"), int(raw["invalid"]), raw["letter_following"]
    )


def run_to_json(self: RunRecord) -> dict[str, Any]:
    s = self.start
    cfg = s.config
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": self.run_id,
        "config": to_dict(cfg),
        "model": dataclasses.asdict(s.model),
        "data": dataclasses.asdict(s.data),
        "prompt": {
            "formulation": cfg.formulation,
            "template_hash": s.template_hash,
            "k": cfg.k,
            "shots_used": {str(k): v for k, v in sorted(self.shots_used.items())},
            "truncated": self.truncated,
            "example": s.example_prompt,
        },
        "scoring": {
            **to_dict(cfg.scoring),
            "multi_pass": self.multi_pass,
            "prefix_fallbacks": self.prefix_fallbacks,
            "invalid": self.scores.invalid,
        },
        "seeds": s.seeds,
        "versions": s.versions,
        "git_commit": s.git_commit,
        "host": {**dataclasses.asdict(s.host), "argv": list(s.host.argv)},
        "sweep": s.sweep,
        "timing": dataclasses.asdict(self.timing),
        "scores": asdict(self.scores),
        "circular": circular_to_json(self.circular) if self.circular else None,
        "letter_bias": letter_bias_to_json(self.letter_bias) if self.letter_bias else None,
        "annotated": annotated_to_json(self.annotated) if self.annotated else None,
    }


def _data_info(doc: dict[str, Any]) -> DataInfo:
    sets = doc.get("annotations")
    return DataInfo(**{**doc, "annotations": annotation_set_from_json(sets) if sets else None})


def run_from_json(raw: dict[str, Any]) -> RunRecord:
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise RecordError(f"record schema {raw.get('schema_version')!r}, this version reads 1")
    try:
        host = raw["host"]
        start = RunStart(
            config=eval_config_from_dict(raw["config"]),
            model=ModelInfo(**raw["model"]),
            data=_data_info(raw["data"]),
            template_hash=raw["prompt"]["template_hash"],
            example_prompt=raw["prompt"]["example"],
            seeds=dict(raw["seeds"]),
            versions=dict(raw["versions"]),
            git_commit=raw["git_commit"],
            host=HostInfo(host["hostname"], host["platform"], tuple(host["argv"]), host.get("threads")),
            sweep=raw.get("sweep"),
        )
        scoring = raw["scoring"]
        return RunRecord(
            run_id=raw["run_id"],
            start=start,
            shots_used={int(k): int(v) for k, v in raw["prompt"]["shots_used"].items()},
            truncated=int(raw["prompt"]["truncated"]),
            multi_pass=int(scoring["multi_pass"]),
            prefix_fallbacks=int(scoring["prefix_fallbacks"]),
            timing=Timing(**raw["timing"]),
            scores=accuracies_from_json(raw["scores"]),
            circular=circular_from_json(raw["circular"]) if raw.get("circular") else None,
            letter_bias=letter_bias_from_json(raw["letter_bias"]) if raw.get("letter_bias") else None,
            annotated=annotated_from_json(raw["annotated"]) if raw.get("annotated") else None,
        )
    except (KeyError, TypeError, ValueError, ConfigError) as err:
        raise RecordError(f"unreadable run record ({type(err).__name__}: {err})") from err


def fields_of(cls: type[Any]) -> Callable[[dict[str, Any]], Any]:
    """`EarlyStop.from_json`, `ShardWork.from_json`: the class called with the document's keys."""

    def read(doc: dict[str, Any]) -> Any:
        try:
            return cls(**doc)
        except TypeError as err:
            raise RecordError(f"unreadable record: {err}") from err

    return read


# Each record class: (the old to_json, the old from_json).
WRITERS: dict[type, Callable[[Any], dict[str, Any]]] = {
    EvalProtocol: protocol_to_json,
    QuestionResult: question_to_json,
    Accuracies: asdict,
    AnnotationSet: annotation_set_to_json,
    AnnotatedScores: annotated_to_json,
    CircularScores: circular_to_json,
    LetterBias: letter_bias_to_json,
    RunRecord: run_to_json,
    EarlyStop: dataclasses.asdict,
    ShardWork: dataclasses.asdict,
}
READERS: dict[type, Callable[[dict[str, Any]], Any]] = {
    EvalProtocol: protocol_from_json,
    RotatedAnswer: rotated_from_json,
    QuestionResult: question_from_json,
    Accuracies: accuracies_from_json,
    AnnotationSet: annotation_set_from_json,
    AnnotatedScores: annotated_from_json,
    CircularScores: circular_from_json,
    LetterBias: letter_bias_from_json,
    RunRecord: run_from_json,
    EarlyStop: fields_of(EarlyStop),
    ShardWork: fields_of(ShardWork),
}
