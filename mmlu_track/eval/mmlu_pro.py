"""MMLU-Pro (Wang et al., "MMLU-Pro", NeurIPS 2024 Datasets and Benchmarks; the hub's
`TIGER-Lab/MMLU-Pro`) read as validated, frozen `Question` records, a category's like a subject's.

Sources, each in the hub's layout and fields (`question_id`, `question`, `options`, `answer` A-J,
`answer_index`, `cot_content`, `category`, `src`):
- a local folder holding `test.jsonl` and `validation.jsonl` (the maintainers' own dumps), or the
  hub's Parquet files (`data/test-*.parquet`, `data/validation-*.parquet`);
- the hub (`datasets.load_dataset("TIGER-Lab/MMLU-Pro", revision=...)`, needs the hub; pin a revision:
  the dataset has changed since its release).

What the published rows hold is kept as it is (options with their leading spaces, the validation
rows' `N/A` padding): which protocol strips or drops them is the prompt's business. A row is refused
in one line naming the file and row: options not 2..10 texts (counting the real ones, `N/A` padding
aside, at least 2; a test question has none), an `answer` letter beyond them, on an `N/A`, or
disagreeing with `answer_index`, an unknown category (the 14 of the paper), no `src`.
`shot_pool(data, protocol, category, k)` refuses a category with fewer validation rows than k.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmlu_track.eval.data import DataError, Question, SubjectData, hub_unreachable, read_rows
from mmlu_track.settings.config import DataConfig
from mmlu_track.settings.subjects import LETTERS, PRO_CATEGORIES

HUB_ID = "TIGER-Lab/MMLU-Pro"
CATEGORIES = PRO_CATEGORIES
OPTION_LETTERS = "".join(LETTERS)
MAX_OPTIONS = len(OPTION_LETTERS)
PAD = "N/A"  # the validation rows pad their options to 10 with it
SPLITS = ("validation", "test")  # validation: the 5-shot examples (5 per category); test: scored


@dataclass(frozen=True)
class ProData:
    """MMLU-Pro as loaded: each category's validation rows (its shots) and test rows, in the source's
    order, and every validation row in that order (lm-eval's leaderboard protocol shots the first 5)."""

    categories: Mapping[str, SubjectData]
    validation: tuple[Question, ...]
    where: str  # the source, for what is said of it


def validate_pro_row(row: Mapping[str, Any], *, where: str, split: str, index: int) -> Question:
    """One hub row as a `Question` (its category as the subject, `question_id` and `src` kept), or
    `DataError` naming where, split and row (counted from 1)."""
    at = f"{where}: {split} row {index + 1}"
    category = row.get("category")
    if category not in CATEGORIES:
        close = difflib.get_close_matches(str(category), CATEGORIES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (one of: {', '.join(CATEGORIES)})"
        raise DataError(f"{at}: unknown category {category!r}{hint}")
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{at}: question is empty or not text ({question!r})")
    options = row.get("options")
    if not isinstance(options, list | tuple) or not all(isinstance(o, str) for o in options):
        raise DataError(f"{at}: options must be a list of texts, got {str(options)[:80]}")
    real = [o for o in options if o.strip() != PAD]
    if len(options) > MAX_OPTIONS or len(real) < 2:
        raise DataError(
            f"{at}: {len(options)} options ({len(real)} not {PAD}): MMLU-Pro questions have 2 to "
            f"{MAX_OPTIONS} (letters {OPTION_LETTERS[0]}-{OPTION_LETTERS[-1]})"
        )
    answer = _answer(row, len(options), at)
    if options[answer].strip() == PAD:
        raise DataError(f"{at}: the answer {OPTION_LETTERS[answer]} is a {PAD} padding option")
    if split == "test" and len(real) != len(options):  # a shot's padding is dropped, a question's never
        raise DataError(
            f"{at}: option {OPTION_LETTERS[options.index(next(o for o in options if o.strip() == PAD))]} is "
            f"{PAD}: a test question's options are its own (only validation rows are padded)"
        )
    qid = row.get("question_id")
    src = row.get("src")
    if not isinstance(src, str) or not src.strip():
        raise DataError(
            f"{at}: src (where the question came from, e.g. ori_mmlu-anatomy) is missing or empty"
        )
    return Question(
        subject=category, split=split, index=index, question=question, choices=tuple(options), answer=answer,
        qid=qid if isinstance(qid, int) and not isinstance(qid, bool) else None,
        src=src,
        cot=cot if isinstance(cot := row.get("cot_content"), str) and cot.strip() else None,
    )  # fmt: skip


def _answer(row: Mapping[str, Any], n_options: int, at: str) -> int:
    """The answer's position: the letter, checked against `answer_index` and the options."""
    letter, position = row.get("answer"), row.get("answer_index")
    if not isinstance(letter, str) or letter.strip() not in tuple(OPTION_LETTERS[:n_options]):  # not "AB"
        raise DataError(
            f"{at}: answer {letter!r} is not a letter of its {n_options} options "
            f"({OPTION_LETTERS[0]}-{OPTION_LETTERS[n_options - 1]})"
        )
    answer = OPTION_LETTERS.index(letter.strip())
    if isinstance(position, bool) or not isinstance(position, int) or position != answer:
        raise DataError(f"{at}: answer {letter!r} and answer_index {position!r} disagree")
    return answer


def _rows(questions: Iterable[Question]) -> dict[str, list[Question]]:
    out: dict[str, list[Question]] = {c: [] for c in CATEGORIES}
    for q in questions:
        out[q.subject].append(q)
    return out


def _checked(rows: Sequence[Mapping[str, Any]], where: str, split: str) -> tuple[Question, ...]:
    if not rows:
        raise DataError(f"{where}: the {split} split has no rows")
    return tuple(validate_pro_row(r, where=where, split=split, index=i) for i, r in enumerate(rows))


def load_local(path: Path) -> ProData:
    """MMLU-Pro from a folder of `test.jsonl` and `validation.jsonl`, or the hub's Parquet layout
    (`data/<split>-*.parquet`)."""
    root = path.expanduser()
    if not root.is_dir():
        raise DataError(
            f"MMLU-Pro folder {root} does not exist (a folder with test.jsonl and validation.jsonl)"
        )
    splits, files = {}, {}
    for split in SPLITS:
        found = [root / f"{split}.jsonl"] if (root / f"{split}.jsonl").is_file() else []
        found = found or sorted((root / "data").glob(f"{split}-*.parquet"))
        if not found:
            raise DataError(
                f"MMLU-Pro folder {root} has no {split} split: expected {split}.jsonl or "
                f"data/{split}-*.parquet"
            )
        rows = [r for f in found for r in read_rows(f)]
        files[split] = str(found[0] if len(found) == 1 else root / "data")
        splits[split] = _checked(rows, files[split], split)
    _unique(splits, files)
    return _assembled(splits, str(root))


def load_hub(revision: str | None) -> ProData:
    """MMLU-Pro from the hub at `revision` (`datasets.load_dataset`); `DataError` offline."""
    import datasets

    hub_unreachable(HUB_ID, "a local copy in the hub's layout: data=mmlu_pro_local data.path=FOLDER")
    splits = {}
    for split in SPLITS:
        try:
            rows = list(datasets.load_dataset(HUB_ID, split=split, revision=revision))
        except Exception as err:  # the hub raises many types; all mean "could not load"
            raise DataError(
                f"could not load {HUB_ID} ({split}) from the hub: {str(err).splitlines()[0]}. Offline? "
                "Give a local copy in the hub's layout: data=mmlu_pro_local data.path=FOLDER"
            ) from err
        splits[split] = _checked(rows, f"hub {HUB_ID}@{revision or 'main'}", split)
    _unique(splits, dict.fromkeys(splits, f"hub {HUB_ID}@{revision or 'main'}"))
    return _assembled(splits, f"{HUB_ID}@{revision or 'main'}")


def _unique(splits: Mapping[str, tuple[Question, ...]], files: Mapping[str, str]) -> None:
    """Refuse a `question_id` given twice (a repeated row, or two questions under one id): the
    store, the gate and lm-eval's importer know a question by it, and one of the two would be lost.
    `files`: where each split was read from, for the one line."""
    seen: dict[int, tuple[str, int]] = {}
    for split, questions in splits.items():
        for q in questions:
            if q.qid is None:
                continue
            first_split, first_index = seen.setdefault(q.qid, (split, q.index))
            if (first_split, first_index) != (split, q.index):
                first = f"{files[first_split]}: {first_split} row {first_index + 1}"
                again = f"{split} row {q.index + 1}"
                again = again if files[split] == files[first_split] else f"{files[split]}: {again}"
                raise DataError(
                    f"question_id {q.qid} is given twice ({first}, and {again}): each question once, "
                    "under its own id"
                )


def _assembled(splits: Mapping[str, tuple[Question, ...]], where: str) -> ProData:
    shots, tests = _rows(splits["validation"]), _rows(splits["test"])
    categories = {c: SubjectData(c, tuple(shots[c]), tuple(tests[c])) for c in CATEGORIES if tests[c]}
    return ProData(categories, splits["validation"], where)


def load(cfg: DataConfig) -> ProData:
    """MMLU-Pro as `data=` says: `local` (`data.path`) or `hub` (`data.revision`)."""
    if cfg.source == "local":
        if cfg.path is None:
            raise DataError("data.path is required for data.source=local")
        return load_local(Path(cfg.path))
    if cfg.source == "hub":
        return load_hub(cfg.revision)
    raise DataError(f"MMLU-Pro has no {cfg.source} source: data.source=local or hub")


def shot_pool(data: ProData, protocol: str, category: str, k: int) -> tuple[Question, ...]:
    """Where a `category` question's k shots are drawn from: the whole validation split
    (`leaderboard`), else its own category's validation rows (`category`, the chains of thought);
    `DataError` where fewer than k."""
    if protocol != "leaderboard":
        pool = data.categories[category].dev if category in data.categories else ()
        where = f"category {category!r} has {len(pool)} validation rows"
    else:
        pool, where = data.validation, f"the validation split has {len(data.validation)} rows"
    if len(pool) < k:
        raise DataError(f"{data.where}: {where}, fewer than k={k} shots")
    return tuple(pool)


def leaks(questions: Iterable[Question]) -> list[Question]:
    """The questions whose correct option alone starts with a space: a prompt that keeps the
    published whitespace hands a model the answer (470 of 12,032 test questions)."""
    return [
        q for q in questions
        if q.choices[q.answer].startswith(" ")
        and not any(c.startswith(" ") for i, c in enumerate(q.choices) if i != q.answer)
    ]  # fmt: skip
