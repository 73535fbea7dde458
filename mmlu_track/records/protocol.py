"""How a run asked and scored its questions: `EvalProtocol`, the one declaration of what makes two
runs' answers comparable question by question (the run identity hashes it, the SQL store keeps it,
the gate compares it field by field, a noise measurement is stored under its prompt part), and
`RecordError` (defined in `records.codec`), what every typed record raises when a stored one cannot
be read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from mmlu_track.records import codec
from mmlu_track.records.codec import RecordError
from mmlu_track.settings.config import EvalConfig

__all__ = ["EvalProtocol", "RecordError", "extraction"]

_QUESTION_SET = ("questions", "n_questions", "limit", "sample_seed")  # which questions, not how asked


@dataclass(frozen=True)
class EvalProtocol:
    """What makes two runs' answers comparable question by question: the same questions, asked with
    the same prompts, scored the same way. The one declaration of comparability: the run identity
    hashes it (`plan.identity`), the SQL store keeps it (`runs.protocol_json`), the gate compares it
    field by field (`differences`) and a model name resolves to the newest run it allows.

    None in a field means "not recorded" (a run stored before the field was): such a field is not
    compared, and `unrecorded` names it so the report can say so.
    """

    questions: str  # the data fingerprint: sha256 of the scored test questions
    n_questions: int
    limit: int | None  # questions per subject (a seeded sample) or None for all
    sample_seed: int | None  # the seed that drew a limit= sample (None without a limit)
    formulation: str
    template_hash: str | None
    k: int
    shot_selection: str | None
    shot_seed: int | None  # the seed of random shots (None for the first k dev rows)
    dev_fingerprint: str | None  # sha256 of the dev rows used as shots
    max_length: int | None  # the configured context limit (None: each model's own)
    allow_truncation: bool | None
    scoring: str
    calibration: str | None
    chat: str = "none"  # the prompt style (`ChatConfig.style`); every run stored before chat prompts was raw
    # How a generation is read: first_char, or "pattern <hash of the patterns>"; older runs: first_char.
    extract: str = "first_char"
    # as_given | circular: compared only by a gate on circular accuracy (rotation 0 is the question
    # as given, so plain accuracies compare across the two).
    choice_order: str = "as_given"
    benchmark: str = "mmlu"  # mmlu | mmlu_pro; every run stored before MMLU-Pro was MMLU

    @classmethod
    def of(
        cls,
        cfg: EvalConfig,
        *,
        questions: str,
        n_questions: int,
        dev_fingerprint: str | None,
        template_hash: str | None,
    ) -> EvalProtocol:
        """The protocol of a run of `cfg` on the questions and shots with these fingerprints and this
        template hash; a seed is recorded only where it drew something (a `limit` sample, random shots)."""
        return cls(
            questions=questions,
            n_questions=n_questions,
            limit=cfg.limit,
            sample_seed=cfg.seed if cfg.limit is not None else None,
            formulation=cfg.formulation,
            template_hash=template_hash,
            k=cfg.k,
            shot_selection=cfg.shot_selection,
            shot_seed=(cfg.seed if cfg.shot_seed is None else cfg.shot_seed)
            if cfg.shot_selection == "random" and cfg.k > 0
            else None,
            dev_fingerprint=dev_fingerprint,
            max_length=cfg.max_length,
            allow_truncation=cfg.allow_truncation,
            scoring=cfg.scoring.method,
            calibration=cfg.scoring.calibration,
            chat=cfg.chat.style,
            extract=extraction(cfg),
            choice_order=cfg.scoring.choice_order,
            benchmark=cfg.benchmark,
        )

    def key(self) -> str:
        """The hash of this protocol (what noise measurements were stored under before `prompt_key`)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    def prompt_key(self) -> str:
        """The hash of how questions are asked and scored, whichever questions and how many: what a
        noise measurement is stored under, so that it serves a comparison of any sample of the same
        prompt protocol (a flip rate is a per-question rate)."""
        doc = {k: v for k, v in self.to_json().items() if k not in _QUESTION_SET}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict; `choice_order` left out when `as_given` and `benchmark`
        when `mmlu`, so an MMLU run's identity and keys are what they were before either."""
        out = codec.dump(self)
        if out["choice_order"] == "as_given":  # as before rotations: an as-given run's identity unchanged
            out.pop("choice_order")
        if out["benchmark"] == "mmlu":  # as before MMLU-Pro
            out.pop("benchmark")
        return out

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> EvalProtocol:
        """The protocol `to_json` wrote (unknown keys ignored; a field added since takes its default);
        `RecordError` naming the field when one is missing or not of its type."""
        return codec.load(cls, doc, "protocol record")

    def differences(self, other: EvalProtocol, *, fewshot_gap: bool = False) -> list[str]:
        """Why runs of `self` (the baseline) and `other` (the candidate) are not comparable, each
        in one phrase naming the setting; empty when they are. `fewshot_gap`: k (and so the shots)
        is what differs on purpose."""
        b, c = self, other
        if b.benchmark != c.benchmark:  # nothing else is worth saying: other questions, other prompts
            return [f"benchmark differs (baseline {b.benchmark}, candidate {c.benchmark})"]
        out = []
        if b.questions != c.questions or b.n_questions != c.n_questions:
            why = ""
            if b.limit != c.limit:
                why = f": limit={_shown(b.limit)} vs limit={_shown(c.limit)}"
            elif b.limit is not None and b.sample_seed != c.sample_seed:
                why = f": the limit={b.limit} sample is drawn by seed={b.sample_seed} vs seed={c.sample_seed}"
            out.append(
                f"questions differ{why} (baseline {b.n_questions} questions, data fingerprint "
                f"{b.questions[:12]}; candidate {c.n_questions}, {c.questions[:12]})"
            )
        checks = ["chat", "formulation", "template_hash", "scoring", "calibration", "extract"]
        if not fewshot_gap:
            checks.append("k")
        if not fewshot_gap or min(b.k, c.k) > 0:
            checks += ["shot_selection", "shot_seed"]
        if not fewshot_gap:
            checks.append("dev_fingerprint")
        checks += ["max_length", "allow_truncation"]
        for name in checks:
            x, y = getattr(b, name), getattr(c, name)
            same = x == y
            if name == "chat" and fewshot_gap and min(b.k, c.k) == 0:  # a 0-shot run is single_turn
                same = _ONE_TURN.get(x, x) == _ONE_TURN.get(y, y)  # (settings.identity.canonical)
            if name == "template_hash" and min(b.k, c.k) == 0 and "none" not in (b.chat, c.chat):
                continue  # it hashes a shot as its style puts it: the gate compares prompts (same_prompts)
            if not same and not (name in _RECORDED and None in (x, y)):
                out.append(
                    f"{_LABELS[name]} differs (baseline {_value(name, x)}, candidate {_value(name, y)})"
                )
        return out

    def unrecorded(self) -> list[str]:
        """The settings this run has no record of (stored before they were): not compared."""
        return [_LABELS[name] for name in _RECORDED if getattr(self, name) is None]


_ONE_TURN = {"multiturn": "single_turn"}  # at 0 shots there are no shots to put as turns

# Fields every run records from now on: None there means "not recorded" (compared on what the runs
# have); in the others None is a value (no limit, the first shots, each model's own context).
_RECORDED = ("template_hash", "shot_selection", "dev_fingerprint", "allow_truncation", "calibration")
_LABELS = {
    "chat": "prompt style chat (raw text or the model's chat template)",
    "extract": "answer extraction (scoring.extract, scoring.patterns)",
    "formulation": "formulation",
    "template_hash": "prompt template (template hash)",
    "scoring": "scoring method",
    "calibration": "scoring.calibration",
    "k": "k",
    "shot_selection": "shot_selection",
    "shot_seed": "the seed of random shots (shot_seed, else seed)",
    "dev_fingerprint": "the few-shot examples (dev rows fingerprint)",
    "max_length": "the context limit max_length",
    "allow_truncation": "allow_truncation",
}


def extraction(cfg: EvalConfig) -> str:
    """How a run of `cfg` reads its generations, as its protocol records it (`EvalProtocol.extract`)."""
    s = cfg.scoring
    if s.extract == "first_char":
        return "first_char"
    if s.extract == "cascade":  # how long it may reason and where it stops move its answers too
        failed = "wrong" if s.failed == "wrong" else f"random{s.failed_seed}"
        stop = hashlib.sha256(json.dumps(list(s.stop)).encode()).hexdigest()[:12]
        return f"cascade max{s.max_new_tokens} stop {stop} failed {failed}"
    return f"pattern {hashlib.sha256(json.dumps(list(s.patterns)).encode()).hexdigest()[:12]}"


def _value(name: str, value: object) -> str:
    if value is None:
        return "null"
    if name == "dev_fingerprint":
        return str(value)[:12]
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _shown(value: int | None) -> str:
    return "null" if value is None else str(value)
