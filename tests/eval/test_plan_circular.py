"""Choice-order rotation (`scoring.choice_order=circular`), letter bias and the gate on circular
accuracy (issue 40): the rotations and their bookkeeping by hand, then the tiny model through the
real entry points (in-process)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mmlu_track.commands.runs import CIRCULAR_NOTE
from mmlu_track.eval.data import Question
from mmlu_track.eval.prompts import Prompt, rotate, rotated, shared_prefix
from mmlu_track.records.results import QuestionResult, RotatedAnswer
from mmlu_track.records.robustness import circular_scores, letter_bias
from mmlu_track.records.run import RunRecord
from mmlu_track.store.mlflow.live import metrics
from mmlu_track.store.mlflow.pages import description
from mmlu_track.store.sql import SqlStore

from ..conftest import CliResult
from ..serve import LlamaServer

Cli = Callable[..., CliResult]
Q = Question("anatomy", "test", 7, "Which?", ("w", "x", "y", "z"), 2)  # gold: C (y)
SMOKE = ["experiment=smoke", "device=cpu", "tracking.mlflow=false", "limit=4"]


def test_a_rotation_turns_the_choices_and_the_gold_moves_with_its_text() -> None:
    assert rotate(Q, 0) == Q
    one = rotate(Q, 1)
    assert (one.choices, one.answer) == (("x", "y", "z", "w"), 1)  # y now under B
    three = rotate(Q, 3)
    assert (three.choices, three.answer) == (("z", "w", "x", "y"), 3)
    assert all(rotate(Q, r).choices[rotate(Q, r).answer] == "y" for r in range(4))


def test_a_rotated_raw_prompt_keeps_the_shared_prefix() -> None:
    shot = Question("anatomy", "dev", 0, "Shot?", ("a", "b", "c", "d"), 0)
    prefix = shared_prefix("original", "anatomy", [shot])
    given = Prompt(Q, prefix + "Which?\nA. w\nB. x\nC. y\nD. z\nAnswer:", 1, prefix)
    turned = rotated(given, 1, "original", [shot])
    assert turned.text == prefix + "Which?\nA. x\nB. y\nC. z\nD. w\nAnswer:"
    assert (turned.prefix, turned.shots_used, turned.question.answer) == (prefix, 1, 1)


def _result(prediction: int | None, others: tuple[int | None, ...], gold: int = 2) -> QuestionResult:
    rotations = tuple(RotatedAnswer(p) for p in others)
    return QuestionResult("anatomy", 0, "h", 0, 1, False, None, None, prediction, gold, None, None, rotations)


def test_circular_correct_consistent_and_letter_following_by_hand() -> None:
    knows = _result(2, (1, 0, 3))  # always the text y: C, B, A, D
    assert knows.chosen == (2, 2, 2, 2)
    assert (knows.circular_correct, knows.consistent, knows.letter_following) == (True, True, False)
    letter = _result(2, (2, 2, 2))  # always C: y, z, w, x
    assert letter.chosen == (2, 3, 0, 1)
    assert (letter.correct, letter.circular_correct, letter.consistent, letter.letter_following) == (
        True,
        False,
        False,
        True,
    )
    wrong_same = _result(0, (3, 2, 1))  # always w: consistent and wrong
    assert (wrong_same.consistent, wrong_same.circular_correct) == (True, False)
    invalid = _result(None, (1, 0, 3))
    assert (invalid.consistent, invalid.circular_correct, invalid.letter_following) == (False, False, False)
    as_given = _result(2, ())
    assert as_given.circular_correct == as_given.correct  # no rotations: just the question as given
    assert as_given.outcome("circular")
    assert letter.outcome("accuracy")
    assert not letter.outcome("circular")


def test_circular_figures_and_letter_bias_by_hand() -> None:
    results = [_result(2, (1, 0, 3)), _result(2, (2, 2, 2))]
    circ = circular_scores(results)
    assert circ is not None
    assert circ.accuracy.micro.acc == 0.5
    assert circ.mean_rotation.micro.acc == 5 / 8  # 4 + 1 of 8 prompts
    assert circ.consistency.micro.acc == 0.5
    bias = letter_bias(results)
    assert bias.gold == (2, 2, 2, 2)  # over 8 prompts the gold text stands under each letter twice
    assert bias.predicted == (1, 1, 5, 1)
    assert bias.recall == (0.5, 0.5, 1.0, 0.5)
    assert bias.letter_following == 0.5
    assert "letters predicted A 12% B 12% C 62% D 12% (gold A 25% B 25% C 25% D 25%)" in bias.line()
    assert circular_scores([_result(2, ())]) is None
    assert letter_bias([_result(2, ())]).letter_following is None


def _headline_is_circular(cli: Cli, tmp_path: Path, said: str, circ: RunRecord, given: RunRecord) -> None:
    """Wherever a person reads a circular run (its console, `runs list`, `runs show`, MLflow's
    description and metrics), circular accuracy comes first, the accuracy as given beside it."""
    assert circ.circular is not None
    c, pct = circ.circular.accuracy, lambda a: f"{100 * a.acc:.2f}"
    assert said.index("circular, acc %") < said.index("subject ")  # before the accuracy as given
    circular_line = next(line for line in said.splitlines() if line.startswith("micro average") and
                         len(line.split()) == 6)  # fmt: skip
    assert circular_line.split()[2:4] == [pct(c.micro), pct(circ.scores.micro)]
    db = f"sqlite:///{tmp_path / 'store.db'}"
    listed = cli("runs", "--db", db, "list", cwd=tmp_path)
    assert listed.code == 0, listed.err
    rows = {line[:12]: line.split() for line in listed.out.splitlines()}
    c_row, g_row = rows[circ.run_id[:12]], rows[given.run_id[:12]]
    assert c_row[11:14] == [pct(c.micro), pct(c.macro), pct(circ.scores.micro)]  # micro, macro, as given
    assert g_row[11:14] == [pct(given.scores.micro), pct(given.scores.macro), "-"]
    assert CIRCULAR_NOTE in listed.out
    shown = cli("runs", "--db", db, "show", circ.run_id, cwd=tmp_path)
    assert shown.out.index("circular, acc %") < shown.out.index("subject ")
    # MLflow: the description's first line (the runs table's Description column) and the metrics'
    # order (the run page lists them as logged)
    assert description(circ).startswith(f"Circular accuracy {pct(c.micro)} % [")
    assert f", as given {pct(circ.scores.micro)} %, macro circular {pct(c.macro)} %" in description(circ)
    assert list(metrics(circ))[:4] == ["circular_micro", "circular_macro", "acc_micro", "acc_macro"]
    assert description(given).startswith("Micro accuracy ")
    assert next(iter(metrics(given))) == "acc_micro"


def _run(
    cli: Cli, tmp_path: Path, name: str, *extra: str
) -> tuple[CliResult, dict[str, object], list[dict[str, object]]]:
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"
    got = cli("eval", *SMOKE, db, f"hydra.run.dir={tmp_path / name}", *extra, cwd=tmp_path)
    assert got.code == 0, got.err
    record = json.loads((tmp_path / name / "results.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / name / "predictions.jsonl").read_text().splitlines()]
    return got, record, rows


@pytest.mark.parametrize("scoring", ["logprob", "generate"])
def test_a_circular_run_reports_and_records_the_rotations_and_rotation_0_is_the_as_given_run(
    cli: Cli, tmp_path: Path, scoring: str
) -> None:
    _, given, given_rows = _run(cli, tmp_path, "given", f"scoring={scoring}")
    out, circ, rows = _run(cli, tmp_path, "circ", f"scoring={scoring}", "scoring.choice_order=circular")
    assert [(r["prediction"], r["prompt_hash"]) for r in rows] == [
        (r["prediction"], r["prompt_hash"]) for r in given_rows
    ]
    for a, b in zip(rows, given_rows, strict=True):
        if scoring == "logprob":
            assert a["logprobs"] == pytest.approx(b["logprobs"], abs=1e-4)
        assert len(a["rotations"]) == 3  # type: ignore[arg-type]
    assert circ["scores"] == given["scores"]  # accuracy as given: the same figures
    figures = circ["circular"]
    assert isinstance(figures, dict)
    assert set(figures) == {"accuracy", "mean_rotation", "consistency"}
    assert set(figures["accuracy"]["subjects"]) == {"abstract_algebra", "anatomy"}
    assert given["circular"] is None
    assert given["letter_bias"]["letter_following"] is None  # type: ignore[index]
    assert circ["letter_bias"]["letter_following"] is not None  # type: ignore[index]
    assert sum(circ["letter_bias"]["gold"]) == 4 * len(rows)  # type: ignore[index]
    assert "circular, acc %" in out.out
    assert "letters predicted A" in out.out
    _headline_is_circular(cli, tmp_path, out.out, RunRecord.from_json(circ), RunRecord.from_json(given))
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    stored = store.question_results(str(circ["run_id"]))
    store.close()
    assert all(len(r.rotations) == 3 for r in stored)
    assert {(r.subject, r.index): r.circular_correct for r in stored} == {
        (str(r["subject"]), int(r["index"])): all(  # type: ignore[call-overload]
            c == r["gold"] for c in QuestionResult.from_json(r).chosen
        )
        for r in rows
    }


@pytest.mark.usefixtures("mlflow_store")
def test_the_gate_on_circular_accuracy(cli: Cli, tmp_path: Path) -> None:
    """Two circular runs gate on all-4-correct; a circular and an as-given run are refused on
    `circular` (exit 2, naming the difference) and compared on plain accuracy."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _, a, _ = _run(
        cli,
        tmp_path,
        "a",
        "scoring.choice_order=circular",
        "tracking.mlflow=true",
        f"tracking.mlflow_uri={uri}",
    )
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    (logged,) = client.search_runs([client.get_experiment_by_name("mmlu_track_smoke").experiment_id])
    metrics = logged.data.metrics
    assert metrics["circular_micro"] == a["circular"]["accuracy"]["micro"]["acc"]  # type: ignore[index]
    assert {
        "consistency_micro",
        "rotation_mean_micro",
        "letter_following",
        "predicted_share_A",
        "recall_A",
    } <= set(metrics)
    assert "Choices in every rotation: circular accuracy" in logged.data.tags["mlflow.note.content"]
    _, b, _ = _run(cli, tmp_path, "b", "scoring.choice_order=circular", "model.tiny_seed=1")
    _, given, _ = _run(cli, tmp_path, "given", "model.tiny_seed=1")
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"

    def compare(base: object, cand: object, *extra: str) -> CliResult:
        args = [f"baseline={base}", f"candidate={cand}", db, "tracking.mlflow=false", *extra]
        return cli("compare", *args, f"hydra.run.dir={tmp_path / 'cmp'}", cwd=tmp_path)

    got = compare(a["run_id"], b["run_id"], "gate.metric=circular", "gate.warn_only=true")
    assert got.code == 0, got.err
    assert "the verdict rests on circular accuracy" in got.out
    assert "consistency: baseline" in got.out
    report = json.loads(next((tmp_path / "cmp").rglob("report.json")).read_text())
    assert report["policy"]["metric"] == "circular"
    assert report["micro"]["baseline_acc"] == a["circular"]["accuracy"]["micro"]["acc"]  # type: ignore[index]
    refused = compare(a["run_id"], given["run_id"], "gate.metric=circular")
    assert refused.code == 2
    (line,) = refused.errors
    assert "choice order differs: gate.metric=circular needs both runs asked in every rotation" in line
    plain = compare(a["run_id"], given["run_id"], "gate.warn_only=true")
    assert plain.code == 0, plain.err  # rotation 0 is the question as given: comparable on accuracy


def test_chat_prompts_rotate_through_the_template_too(tmp_path: Path) -> None:
    from mmlu_track.pipeline.evaluate import QUIET, run

    from ..conftest import tiny_run_cfg

    db = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["chat=multiturn", "limit=3", "subjects=[anatomy]"]
    given = run(tiny_run_cfg(db, *args, model="tiny"), tmp_path / "a", display=QUIET)
    circ = run(
        tiny_run_cfg(db, *args, "scoring.choice_order=circular", model="tiny"), tmp_path / "b", display=QUIET
    )
    assert [r.prediction for r in circ.results] == [r.prediction for r in given.results]
    assert all(len(r.rotations) == 3 and r.rotations[0].logprobs for r in circ.results)
    assert circ.record is not None
    assert circ.record.multi_pass == circ.record.prefix_fallbacks == 0  # every rotation extends the prefix
    assert circ.record.circular is not None


def test_the_sequential_gate_on_circular_accuracy(tmp_path: Path) -> None:
    """A circular baseline that knew every answer in every rotation: a circular candidate stops
    as a regression at the first look; an as-given baseline is refused on `circular`."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from mmlu_track.gate.sequential_run import sequential_gate
    from mmlu_track.gate.stats import ComparisonError
    from mmlu_track.pipeline.evaluate import QUIET, Display, run
    from mmlu_track.store.orm import QuestionRow

    from ..conftest import compose_eval

    db = f"sqlite:///{tmp_path / 'store.db'}"
    over = [
        "model=tiny",
        "device=cpu",
        "k=0",
        "limit=30",
        "subjects=[anatomy,marketing]",
        "tracking=sql_only",
    ]
    over += [f"tracking.db_url={db}", "scoring.choice_order=circular"]
    quiet: dict[str, Any] = {"display": QUIET}
    base = run(compose_eval(over), tmp_path / "base", **quiet)
    given = run(compose_eval([*over[:-1], "model.tiny_seed=3"]), tmp_path / "given", **quiet)
    with Session(SqlStore(db).engine) as s, s.begin():
        for row in s.scalars(select(QuestionRow).where(QuestionRow.run_id == base.run_id)):
            row.prediction, row.correct = row.gold, True
            row.rotations_json = json.dumps(
                [{"prediction": (row.gold - r) % 4, "logprobs": None, "generated": None} for r in (1, 2, 3)]
            )
    gate = ["gate.sequential=true", "gate.margin=0.05", "gate.looks=5", "gate.metric=circular"]
    lines: list[str] = []
    cfg = compose_eval([*over, "model.tiny_seed=1", f"gate.baseline={base.run_id}", *gate])
    with sequential_gate(cfg, echo=lines.append) as looks:
        gated = run(cfg, tmp_path / "cand", display=Display(lines.append, progress=False), looks=looks)
        code = looks.conclude(gated.run_id, tmp_path / "cand", echo=lines.append)
    assert code == 1
    assert any("REGRESSION" in line for line in lines), lines
    assert any("the verdict rests on circular accuracy" in line for line in lines), lines
    # 60 questions cannot show non-inferiority at 5 points even with no change: said before look 1.
    said = [
        i
        for i, line in enumerate(lines)
        if "cannot show non-inferiority at δ = 5.0 pts on 60 questions" in line
    ]
    assert said
    assert said[0] < min(i for i, line in enumerate(lines) if line.startswith("look 1/5"))
    cfg = compose_eval([*over, "model.tiny_seed=2", f"gate.baseline={given.run_id}", *gate])
    with pytest.raises(ComparisonError, match="choice order differs"), sequential_gate(cfg) as looks:
        run(cfg, tmp_path / "refused", display=Display(lines.append, progress=False), looks=looks)


def test_a_served_model_answers_each_rotation(cpp_server: LlamaServer, cli: Cli, tmp_path: Path) -> None:
    """Four requests per question, the first rotation's the as-given run's (on llama.cpp's own
    server: the rotations are prompts like any other to an engine, and llama-cpp-python's computes
    every prompt token's logits, 10 s of CPU here for the same five prompts)."""
    from .test_openai_api import _eval, _served

    args = _served(cpp_server.base_url, "k=0", "tracking.mlflow=false", subjects="[anatomy]", limit=1)
    docs = {}
    for name, extra in (("given", []), ("circ", ["scoring.choice_order=circular"])):
        got = _eval(cli, tmp_path, *args, *extra, out=name)
        assert got.code == 0, got.err
        docs[name] = json.loads((tmp_path / name / "results.json").read_text())
        docs[name]["rows"] = [
            json.loads(x) for x in (tmp_path / name / "predictions.jsonl").read_text().splitlines()
        ]
    given, circ = docs["given"], docs["circ"]
    assert [r["logprobs"] for r in circ["rows"]] == [r["logprobs"] for r in given["rows"]]
    assert all(len(r["rotations"]) == 3 for r in circ["rows"])
    assert circ["timing"]["requests"] - given["timing"]["requests"] >= 3  # 3 more prompts per question
    assert circ["circular"]["accuracy"]["micro"]["n"] == 1


def test_the_plan_renders_every_rotation_and_checks_that_each_fits(tiny_lm: Any) -> None:
    """Rotations are planned with rotation 0 (the session renders none): a rotation that does not
    fit with rotation 0's shots drops shots as any prompt does; one that never fits refuses the run
    (it was truncated by the scorer, silently)."""
    from mmlu_track.eval import plan
    from mmlu_track.eval.in_process import InProcess
    from mmlu_track.eval.plan import TruncationError

    from ..conftest import compose_eval

    cfg = compose_eval(["model=tiny", "device=cpu", "k=3", "limit=2", "subjects=[anatomy]",
                        "scoring.choice_order=circular"])  # fmt: skip
    lm, the_plan = InProcess(tiny_lm), plan.plan(cfg)
    given = plan.render(cfg, the_plan, lm, lambda _: True)
    everything = plan.rotations(cfg, the_plan, given, lm, lambda _: True)
    first = everything["anatomy"][0]
    assert len(first) == 4
    assert first[0] == given["anatomy"][0]
    assert [p.question.answer for p in first] == [(first[0].question.answer - r) % 4 for r in range(4)]
    assert {p.shots_used for p in first} == {3}
    assert {p.prefix for p in first} == {first[0].prefix}  # one few-shot prefix for all four
    too_long = first[1].text  # rotation 1 with 3 shots does not fit: it drops one
    dropped = plan.rotations(cfg, the_plan, given, lm, lambda t: t != too_long)["anatomy"][0]
    assert [p.shots_used for p in dropped] == [3, 2, 3, 3]
    assert dropped[1].question == first[1].question

    def never(text: str) -> bool:  # rotation 1 of the first question fits with no number of shots
        return not text.endswith(first[1].text[len(first[1].prefix) :])

    with pytest.raises(TruncationError, match=r"1 of 6 prompts do not fit .* anatomy question"):
        plan.rotations(cfg, the_plan, given, lm, never)
    as_given = compose_eval(["model=tiny", "device=cpu", "k=3", "limit=2", "subjects=[anatomy]"])
    assert plan.rotations(as_given, the_plan, given, lm, never)["anatomy"][0] == (given["anatomy"][0],)
