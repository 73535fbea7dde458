"""MMLU-Redux annotations (`data.annotations`) read and matched to the evaluated questions.

Where from:
- a hub id (`edinburgh-dawg/mmlu-redux-2.0`: one config per subject, split `test`; fields
  `question`, `choices`, `answer`, `error_type`, …), loaded with `datasets` for each evaluated
  subject the set has (needs the hub);
- a local file or folder: CSV (MMLU-Redux 1.0's `mmlu_<subject>.csv` as its authors publish it:
  `,`- or `;`-separated, found from the header; columns by name, in any order, empty ones ignored;
  UTF-8, else cp1252/Latin-1 with a warning naming the file; `choices` a list or its Python/JSON
  text), JSONL, JSON (a list of rows) or Parquet (a download of the hub's files). A row's subject
  is its `subject` field, else the file's name (`<subject>` or `mmlu_<subject>`), else the nearest
  folder named for a subject.

Matching is by the question's text and its four choices (whitespace collapsed) within its
subject, never by row position: a row no test question of its (evaluated) subject has is counted
unmatched and shown. An error type is read whatever its case, spaces, hyphens or underscores
(`OK `, `Wrong Groundtruth`, `bad-question-clarity`); one that still spells none of `ERROR_TYPES`
is `UNKNOWN`: counted, named in one warning with examples, never clean.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmlu_track.eval.data import DataError, Question, SubjectData, _read_jsonl, _read_parquet
from mmlu_track.records.annotations import ERROR_TYPES, LABELS, OK, UNKNOWN, AnnotationSet
from mmlu_track.settings.subjects import SUBJECTS
from mmlu_track.support.console import warn
from mmlu_track.support.errors import json_problem

Key = tuple[str, str, tuple[str, ...]]  # subject, question, choices (whitespace collapsed)
EXAMPLES = 3


@dataclass(frozen=True)
class Annotated:
    """The labels of the run's questions ((subject, index) -> error type) and how the set matched."""

    labels: dict[tuple[str, int], str]
    info: AnnotationSet


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _key(subject: str, question: str, choices: Iterable[str]) -> Key:
    return subject, _norm(question), tuple(_norm(c) for c in choices)


def _subject_of(path: Path, root: Path) -> str | None:
    """The file's name, else the nearest folder named for a subject — inside `root` only (a folder
    above what the user named says nothing of these files); a file named alone: its own folder."""
    stem = path.stem.removeprefix("mmlu_")
    inside = (
        [path.parent.name]
        if path == root
        else [p.name for p in path.parents if p == root or root in p.parents]
    )
    for name in (stem, stem.split("-")[0], *inside):
        if name in SUBJECTS:
            return name
    return None


def _choices(raw: object, at: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        text = raw
        try:
            raw = ast.literal_eval(text)  # 1.0's CSV writes the list as Python text
        except (ValueError, SyntaxError, MemoryError, RecursionError):  # a deep nest exhausts the parser
            raise DataError(f"{at}: choices {text[:60]!r} is not a list") from None
    if not isinstance(raw, list | tuple) or len(raw) != 4 or not all(isinstance(c, str) for c in raw):
        raise DataError(f"{at}: choices must be 4 texts, got {str(raw)[:80]}")
    return tuple(raw)


def error_type(raw: object) -> str:
    """The label `raw` spells, its case, spaces, hyphens and underscores aside (`Wrong Groundtruth`,
    `OK `, `bad-options_clarity`); `UNKNOWN` when it spells none of `ERROR_TYPES`."""
    label = re.sub(r"[\s_-]+", "_", str(raw).strip().lower()).strip("_") if raw is not None else ""
    return label if label in ERROR_TYPES else UNKNOWN


def _decoded(path: Path) -> str:
    """The file's text: UTF-8 (a byte-order mark dropped), else cp1252/Latin-1 with a warning."""
    data = path.read_bytes()
    if b"\x00" in data:
        raise DataError(f"{path}: a binary file, not CSV text")
    try:
        return data.decode("utf-8-sig")  # a spreadsheet's byte-order mark is no header
    except UnicodeDecodeError:
        pass
    try:
        text = data.decode("cp1252")  # Latin-1's printable letters, and Windows' quotes and dashes
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: neither UTF-8 nor cp1252/Latin-1 text: save the file as UTF-8") from err
    warn(f"{path} is not UTF-8: read as cp1252/Latin-1 (Windows' Western encoding)")
    return text


NEEDED = ("question", "choices", "error_type")


def _read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows by header name (`,`, `;` or tab, whichever splits the header into the names needed)."""
    text = _decoded(path)
    first = text.split("\n", 1)[0]
    delimiter = max(",;\t", key=lambda d: sum(h.strip().lower() in NEEDED for h in first.split(d)))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)  # quoted newlines kept
    try:
        header = [h.strip().lower() for h in next(reader, [])]
        if missing := [n for n in NEEDED if n not in header]:
            raise DataError(f"{path}: the header names no {', '.join(missing)} column (it has {header[:8]})")
        return [{h: v for h, v in zip(header, row, strict=False) if h} for row in reader if any(row)]
    except csv.Error as err:
        raise DataError(f"{path}: line {reader.line_num}: {err}") from None


def _read_json(path: Path) -> list[dict[str, Any]]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path} is not JSON: {json_problem(err)}") from None
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise DataError(f"{path}: expected a JSON list of annotation objects")
    return doc


_READERS = {".csv": _read_csv, ".jsonl": _read_jsonl, ".json": _read_json, ".parquet": _read_parquet}


def _local_rows(source: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(where, subject from the path, row) for every row of the file or the folder's files."""
    root = Path(source).expanduser()
    if not root.exists():
        raise DataError(f"data.annotations={source}: no such file or folder (a hub id has one '/')")
    files = (
        [root]
        if root.is_file()
        else sorted(p for p in root.rglob("*") if p.suffix in _READERS and not p.is_dir())
    )
    if root.is_file() and root.suffix not in _READERS:
        kind = root.suffix or "suffix-less"
        raise DataError(f"data.annotations={source}: a {kind} file (expected {', '.join(_READERS)})")
    if not files:
        raise DataError(f"data.annotations={source}: no {', '.join(_READERS)} file in this folder")
    out = []
    for path in files:
        try:
            rows = _READERS[path.suffix](path)
        except OSError as err:  # a dangling link, a link loop, no permission
            raise DataError(f"data.annotations: {path} cannot be read ({err.strerror or err})") from None
        subject = _subject_of(path, root)
        out += [(f"{path}: row {i + 1}", subject, row) for i, row in enumerate(rows)]
    return out


def _hub_rows(source: str, subjects: Iterable[str]) -> list[tuple[str, str | None, dict[str, Any]]]:
    import datasets

    try:
        configs = set(datasets.get_dataset_config_names(source))
        wanted = [s for s in subjects if s in configs]
        sets = {s: datasets.load_dataset(source, s, split="test") for s in wanted}
    except Exception as err:  # the hub raises many types; all mean "could not load"
        raise DataError(
            f"could not load the annotations {source} from the hub: {str(err).splitlines()[0][:200]}. "
            "Offline? Give a local copy: data.annotations=FOLDER"
        ) from None
    return [
        (f"hub {source} ({s}): row {i + 1}", s, dict(r)) for s, ds in sets.items() for i, r in enumerate(ds)
    ]


def _is_hub_id(source: str) -> bool:
    """`owner/name`, not a local path: a missing `dir/file.jsonl` is a typo, never a hub id."""
    if Path(source).expanduser().exists() or Path(source).suffix in _READERS:
        return False
    return re.fullmatch(r"[\w.-]+/[\w.-]+", source) is not None


@dataclass(frozen=True)
class _Read:
    labels: dict[Key, str]
    rows: int
    conflicts: int
    fingerprint: str
    per_label: dict[str, int]


def _say_unknown(unknown: list[tuple[str, object]]) -> None:
    """One warning for every row whose label spells none of `ERROR_TYPES`, with examples."""
    if unknown:
        spelled = list(dict.fromkeys(repr(raw) for _, raw in unknown))
        shown = ", ".join(spelled[:EXAMPLES]) + (" …" if len(spelled) > EXAMPLES else "")
        warn(
            f"data.annotations: {len(unknown):,} {'row has' if len(unknown) == 1 else 'rows have'} an "
            f"error_type that is none of "
            f"{', '.join(ERROR_TYPES)} ({shown}; first at {unknown[0][0]}): counted as {UNKNOWN}, never clean"
        )


def read(source: str, subjects: Iterable[str]) -> _Read:
    """Every annotation of `source` as key -> error type. A question annotated twice differently
    is counted a conflict and keeps an error, never ok (of several errors, the first annotated)."""
    rows = _hub_rows(source, subjects) if _is_hub_id(source) else _local_rows(source)
    if not rows:
        raise DataError(f"data.annotations={source} holds no annotations (no rows)")
    labels: dict[Key, str] = {}
    conflicts: set[Key] = set()
    per_label = dict.fromkeys(LABELS, 0)
    unknown: list[tuple[str, object]] = []
    for at, from_path, row in rows:
        given = row.get("subject")
        subject = given or from_path
        if given and given not in SUBJECTS:
            raise DataError(f"{at}: unknown subject {str(given)[:60]!r} (one of MMLU's 57, e.g. anatomy)")
        if subject not in SUBJECTS:
            raise DataError(f"{at}: no subject (a subject field, or a file or folder named for one)")
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise DataError(f"{at}: question is empty or not text")
        key = _key(str(subject), question, _choices(row.get("choices"), at))
        label = error_type(raw := row.get("error_type"))
        per_label[label] += 1
        if label == UNKNOWN:
            unknown.append((at, raw))
        old = labels.setdefault(key, label)
        if old != label:
            conflicts.add(key)  # counted once per question, however many rows disagree
            labels[key] = label if old == OK else old
    _say_unknown(unknown)
    digest = hashlib.sha256()
    for key in sorted(labels):
        digest.update(json.dumps([*key[:2], list(key[2]), labels[key]], ensure_ascii=False).encode() + b"\n")
    counted = {k: n for k, n in per_label.items() if n}
    return _Read(labels, len(rows), len(conflicts), digest.hexdigest(), counted)


def annotate(
    source: str, data: Mapping[str, SubjectData], chosen: Mapping[str, Iterable[Question]]
) -> Annotated:
    """The labels of the `chosen` questions, and how `source`'s annotations matched the evaluated
    subjects' whole test splits (`data`): an annotation no test question has is unmatched."""
    got = read(source, data)
    tests: dict[Key, list[int]] = {}
    for subject, d in data.items():
        for q in d.test:
            tests.setdefault(_key(subject, q.question, q.choices), []).append(q.index)
    evaluated = [k for k in got.labels if k[0] in data]
    unmatched = [k for k in evaluated if k not in tests]
    by_index = {(k[0], i): got.labels[k] for k in evaluated if k in tests for i in tests[k]}
    labels = {(q.subject, q.index): by_index[(q.subject, q.index)]
              for qs in chosen.values() for q in qs if (q.subject, q.index) in by_index}  # fmt: skip
    info = AnnotationSet(
        source=source,
        fingerprint=got.fingerprint,
        rows=got.rows,
        matched=len(evaluated) - len(unmatched),
        unmatched=len(unmatched),
        other_subjects=len(got.labels) - len(evaluated),
        conflicts=got.conflicts,
        unmatched_examples=tuple(f"{k[0]}: {k[1][:60]}" for k in unmatched[:EXAMPLES]),
        per_label=got.per_label,
    )
    return Annotated(labels, info)
