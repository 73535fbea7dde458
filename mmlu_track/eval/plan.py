"""What one evaluation will score, before anything is recorded: the questions and shots, every
prompt rendered to fit the model's context, and the run's identity.

Shots are dropped from a prompt (last first) until it fits; a prompt that does not fit even with
no shots refuses the run (`TruncationError`) unless `allow_truncation` lets the scorer keep its
last tokens. The identity hashes everything that determines the results (settings, the weights
and the dtype they ran in, the questions, the template), so an unfinished run is resumed only by
an evaluation that would produce the same results.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mmlu_track.eval import mmlu_pro, prompts
from mmlu_track.eval.annotations import Annotated, annotate
from mmlu_track.eval.backend import Backend, ModelError
from mmlu_track.eval.data import DataError, Question, SubjectData, fingerprint, load_subjects, subsample
from mmlu_track.records.protocol import EvalProtocol
from mmlu_track.records.results import Docs
from mmlu_track.records.run import ModelInfo, RunRecord
from mmlu_track.settings.config import EvalConfig
from mmlu_track.settings.identity import identity_dict
from mmlu_track.support.errors import MmluTrackError


def fits_check(lm: Backend, reserve: int) -> Callable[[str], bool]:
    """A test of whether a prompt's tokens fit the model's context with `reserve` tokens left over
    (for generated tokens); it tokenizes only texts long enough to possibly not fit."""
    limit = lm.info.max_length - reserve

    def fits(text: str) -> bool:
        # A token covers at least one UTF-8 byte: short texts fit without tokenizing them.
        if len(text.encode()) + 1 <= limit:
            return True
        return len(lm.encode(text)) <= limit

    return fits


def identity(
    cfg: EvalConfig,
    info: ModelInfo,
    protocol: EvalProtocol,
    *,
    fresh: bool = False,
    annotations: str | None = None,
) -> str:
    """Hash of everything that determines a run's results: the protocol (questions, prompts,
    scoring: what the gate compares), the weights and the dtype they ran in, and the settings.
    `fresh` (tracking.resume=false): a new identity of the same length, which nothing resumes.
    `annotations`: the MMLU-Redux set's content fingerprint, so that a changed file is another run
    (hashed as `data.annotations: NAME@FINGERPRINT`, as before the config was left as asked)."""
    settings = identity_dict(cfg)
    if annotations is not None:
        settings["data"]["annotations"] = f"{cfg.data.annotations}@{annotations}"
    # The dtype actually used: `auto` means fp32 on a CPU and bf16 on a GPU, different results.
    ident = {
        "config": {**settings, "dtype": info.dtype},
        "weights": [info.location, info.revision, info.weights_sha256],
        "protocol": protocol.to_json(),
        **({"fresh": time.time_ns()} if fresh else {}),
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


class TruncationError(MmluTrackError):
    """Prompts do not fit the context even with no shots, and truncation was not allowed."""

    before_any_work = True  # raised while the run is planned, before anything is recorded


def style(cfg: EvalConfig, lm: Backend) -> prompts.Style:
    """How this run puts its prompts: raw, or through the model's own chat template (refused,
    before anything is recorded, for a model without one)."""
    if cfg.chat.style == "none":
        return prompts.RAW
    template = lm.chat_template
    if template is None:
        raise ModelError(
            f"chat={cfg.chat.style} needs the model's chat template, and the tokenizer of {lm.info.name} has "
            "none: use chat=none (raw prompts) or a model whose tokenizer has one"
        )
    return prompts.Style(cfg.chat.style, cfg.chat.system, lm.apply_chat_template, template)


def render(
    cfg: EvalConfig,
    plan: Plan,
    lm: Backend,
    fits: Callable[[str], bool],
    how: prompts.Style = prompts.RAW,
) -> dict[str, list[prompts.Prompt]]:
    """Every subject's prompts, shots dropped until each fits; refuse any that never fits."""
    out = {
        s: [prompts.fit(cfg.formulation, plan.shots[s], q, fits, how) for q in qs]
        for s, qs in plan.questions.items()
    }
    _refuse_too_long(cfg, lm, [p for ps in out.values() for p in ps], fits)
    return out


Asked = tuple[prompts.Prompt, ...]  # one question as the run asks it: rotation 0 (as given), then 1..n-1


def rotations(
    cfg: EvalConfig,
    plan: Plan,
    rendered: dict[str, list[prompts.Prompt]],
    lm: Backend,
    fits: Callable[[str], bool],
    how: prompts.Style = prompts.RAW,
) -> dict[str, list[Asked]]:
    """Every prompt the run scores, per subject and question: `(as given,)`, or in a circular run
    its n rotations (one per choice), rotation 0 the prompt as given. A rotation keeps rotation 0's
    shots (their prefix is shared) unless it does not fit with them: then it drops shots, last first,
    as any prompt does; one that never fits refuses the run as rotation 0 would (`render`)."""
    if cfg.scoring.choice_order != "circular":
        return {s: [(p,) for p in ps] for s, ps in rendered.items()}
    out: dict[str, list[Asked]] = {}
    for subject, ps in rendered.items():
        shots = plan.shots[subject]
        out[subject] = [
            (p, *(_rotation(cfg, p, r, shots, fits, how) for r in range(1, prompts.rotations_of(p.question))))
            for p in ps
        ]
    _refuse_too_long(cfg, lm, [p for asked in out.values() for a in asked for p in a[1:]], fits)
    return out


def _rotation(
    cfg: EvalConfig,
    given: prompts.Prompt,
    r: int,
    shots: tuple[Question, ...],
    fits: Callable[[str], bool],
    how: prompts.Style,
) -> prompts.Prompt:
    turned = prompts.rotated(given, r, cfg.formulation, shots, how)
    if fits(turned.text) or given.shots_used == 0:
        return turned
    return prompts.fit(cfg.formulation, shots[: given.shots_used], turned.question, fits, how)


def _refuse_too_long(
    cfg: EvalConfig, lm: Backend, asked: list[prompts.Prompt], fits: Callable[[str], bool]
) -> None:
    """Refuse the run when a prompt does not fit even with no shots (unless allow_truncation)."""
    too_long = [p for p in asked if p.shots_used == 0 and not fits(p.text)]
    if too_long and not cfg.allow_truncation:
        longest = max(too_long, key=lambda p: len(p.text))
        n_tokens = len(lm.encode(longest.text))
        raise TruncationError(
            f"{len(too_long)} of {len(asked)} prompts do not fit the model's context "
            f"({lm.info.max_length} tokens) even with 0 shots, e.g. {longest.question.subject} question "
            f"{longest.question.index} ({n_tokens} tokens); raise max_length, or set allow_truncation=true "
            "to score their last tokens"
        )


@dataclass(frozen=True)
class Plan:
    """What a run scores: per subject its test questions (after `limit`) and its shots, the
    fingerprints of those questions and of the shots, and, with `data.annotations`, their labels."""

    questions: dict[str, tuple[Question, ...]]  # per subject, the test questions to score
    shots: dict[str, tuple[Question, ...]]
    fingerprint: str
    dev_fingerprint: str
    annotated: Annotated | None = None  # data.annotations: the questions' labels, how they matched

    @property
    def all_questions(self) -> list[Question]:
        """Every planned test question, subject by subject in plan order."""
        return [q for qs in self.questions.values() for q in qs]

    def docs(self) -> Docs:
        """Each planned question's text and choices, for predictions.jsonl."""
        return {
            (q.subject, q.index): {"question": q.question, "choices": list(q.choices)}
            for q in self.all_questions
        }


def question_docs(record: RunRecord) -> Docs | None:
    """A stored run's questions' text and choices (for predictions.jsonl, MLflow's per-question
    tables), planned again from its settings: only when they are the questions it scored (same
    fingerprint), else None."""
    cfg = record.start.config
    try:  # the questions alone: their annotations are in the run's rows
        again = plan(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, annotations=None)))
    except (MmluTrackError, OSError, ValueError):
        return None
    return again.docs() if again.fingerprint == record.start.data.fingerprint else None


def _load(cfg: EvalConfig) -> tuple[dict[str, SubjectData], dict[str, tuple[Question, ...]]]:
    """Each subject's questions and the rows its shots are drawn from: MMLU's dev split, or
    MMLU-Pro's validation rows as the protocol says (`mmlu_pro.shot_pool`)."""
    if cfg.benchmark == "mmlu":
        data = load_subjects(cfg.data, cfg.subjects)
        return data, {s: d.dev for s, d in data.items()}
    pro = mmlu_pro.load(cfg.data)
    if missing := [s for s in cfg.subjects if s not in pro.categories]:
        have = ",".join(pro.categories)
        raise DataError(
            f"{pro.where}: no test questions of category {missing[0]!r}: name the categories it has, "
            f"'subjects=[{have}]'"
        )
    data = {s: pro.categories[s] for s in cfg.subjects}
    return data, {s: mmlu_pro.shot_pool(pro, cfg.formulation, s, cfg.k) for s in data}


def plan(cfg: EvalConfig) -> Plan:
    """The questions and shots the settings choose: each subject loaded and validated, its test split
    subsampled to `limit`, its shots selected from dev; `DataError` (or `ValueError` for more shots
    than dev rows) when they cannot be. No model is needed."""
    data, pools = _load(cfg)
    chosen = {s: subsample(d.test, cfg.limit, cfg.seed) for s, d in data.items()}
    seed = cfg.seed if cfg.shot_seed is None else cfg.shot_seed
    shots = {s: prompts.select_shots(pools[s], cfg.k, cfg.shot_selection, seed) for s in data}
    return Plan(
        questions=chosen,
        shots=shots,
        fingerprint=fingerprint(q for qs in chosen.values() for q in qs),
        dev_fingerprint=fingerprint(q for s in shots.values() for q in s),
        annotated=annotate(cfg.data.annotations, data, chosen) if cfg.data.annotations else None,
    )


# A subject with more questions than this is scored in slices of about this many: professional_law
# (1,534 questions, about 40 % of 5-shot MMLU's tokens) becomes 15 units that shards share.
UNIT_QUESTIONS = 100


@dataclass(frozen=True)
class Unit:
    """Questions of one subject's plan scored and committed at once: positions [start, stop), or
    the positions `picks` (a look of the sequential gate; then start and stop bound them)."""

    subject: str
    start: int
    stop: int
    cost: int  # characters run through the model: the shared prefix once, each question's own part
    picks: tuple[int, ...] = ()

    @property
    def positions(self) -> tuple[int, ...]:
        """The unit's positions in its subject's plan: `picks` as given, else start to stop - 1 in order."""
        return self.picks or tuple(range(self.start, self.stop))

    @property
    def key(self) -> str:
        """The unit's name, unique within a run: `subject[start:stop]`, or `subject[i,j,...]` for picks."""
        where = ",".join(map(str, self.picks)) if self.picks else f"{self.start}:{self.stop}"
        return f"{self.subject}[{where}]"


def _cost(ps: list[prompts.Prompt]) -> int:
    return len(ps[0].prefix) + sum(len(p.text) - len(p.prefix) for p in ps)


def pick(subject: str, ps: list[prompts.Prompt], positions: tuple[int, ...]) -> Unit:
    """A unit of these positions of a subject's prompts."""
    chosen = [ps[i] for i in positions]
    return Unit(subject, min(positions), max(positions) + 1, _cost(chosen), tuple(positions))


def looks(rendered: dict[str, list[prompts.Prompt]], count: int, seed: int) -> list[list[Unit]]:
    """The sequential gate's looks: each subject's questions in a seeded random order (its own
    stream, from `seed` and the subject's name), spread evenly over the `count` looks from a seeded
    phase of its own: the question of rank r goes to look ⌊(r + phase)·count/n⌋. After look j a
    subject has j/count of its questions (±1), so each look covers the subjects in proportion; and
    subjects with fewer questions than looks (a small `limit`) land at different looks, so looks
    hold questions instead of all of them falling into the same few."""
    out: list[list[Unit]] = [[] for _ in range(count)]
    for subject, ps in rendered.items():
        stream = int(hashlib.sha256(f"{seed}:{subject}".encode()).hexdigest()[:16], 16)
        rng = np.random.default_rng(stream)
        order, phase = rng.permutation(len(ps)), rng.random()
        per_look: dict[int, list[int]] = {}
        for rank, position in enumerate(order):
            per_look.setdefault(int((rank + phase) * count / len(ps)), []).append(int(position))
        for j, chosen in sorted(per_look.items()):
            out[j].append(pick(subject, ps, tuple(sorted(chosen))))
    return out


def units(cfg: EvalConfig, rendered: dict[str, list[prompts.Prompt]]) -> list[Unit]:
    """The run's units in plan order; they depend on the plan only, never on the number of shards,
    so any shard count resumes the same committed units. Mean calibration needs a whole subject at
    once: then a unit is a subject."""
    out = []
    for subject, ps in rendered.items():
        pieces = 1 if cfg.scoring.calibration != "none" else max(1, round(len(ps) / UNIT_QUESTIONS))
        bounds = [len(ps) * i // pieces for i in range(pieces + 1)]
        for start, stop in itertools.pairwise(bounds):
            out.append(Unit(subject, start, stop, _cost(ps[start:stop])))
    return out


def assign(all_units: list[Unit], shards: int) -> list[list[Unit]]:
    """Each shard's units: longest processing time first (Graham, *SIAM J. Appl. Math.* 17:416,
    1969: the costliest unit goes to the least loaded shard; within 4/3 of the best makespan).
    Deterministic (ties by plan position), and each shard's units keep plan order."""
    loads = [0] * shards
    owner: dict[int, int] = {}
    for i in sorted(range(len(all_units)), key=lambda i: (-all_units[i].cost, i)):
        target = min(range(shards), key=lambda s: (loads[s], s))
        owner[i] = target
        loads[target] += all_units[i].cost
    return [[u for i, u in enumerate(all_units) if owner[i] == s] for s in range(shards)]
