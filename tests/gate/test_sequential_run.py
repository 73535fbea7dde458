"""The sequential gate end to end: looks, an early stop recorded as such, the reports, the resume
to completion, name lookup never taking a stopped run, and the exit codes."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from mmlu_track.commands.runs import main as runs_main
from mmlu_track.eval import plan
from mmlu_track.gate.run import execute as compare_execute
from mmlu_track.gate.sequential_run import sequential_gate
from mmlu_track.gate.stats import ComparisonError
from mmlu_track.pipeline.evaluate import QUIET, Display, run
from mmlu_track.settings.config import CompareConfig, EvalConfig, GateConfig, TrackingConfig
from mmlu_track.settings.subjects import SUBJECTS as SUBJECT_NAMES
from mmlu_track.store.orm import ComparisonRow, QuestionRow, Run
from mmlu_track.store.sql import SqlStore

from ..conftest import CliResult, compose_eval

SUBJECTS = "subjects=[abstract_algebra,anatomy,astronomy,marketing]"
FAKE = ["model=fake", "device=cpu", "k=0", "limit=50", SUBJECTS, "tracking=sql_only"]
GATE = ["gate.sequential=true", "gate.margin=0.05", "gate.looks=10"]
Cli = Callable[..., CliResult]


def _cli(cli: Cli, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> CliResult:
    """`python -m mmlu_track` in-process."""
    return cli("eval", *args, cwd=tmp_path, env=env)


def _compare(cli: Cli, tmp_path: Path, db: str, *args: str) -> CliResult:
    """`python -m mmlu_track.compare` in-process."""
    folder = f"hydra.run.dir={tmp_path / 'cmp'}"
    return cli("compare", f"tracking.db_url={db}", "tracking.mlflow=false", folder, *args, cwd=tmp_path)


def _runs(db: str) -> dict[str, Run]:
    with Session(SqlStore(db).engine) as s:
        return {r.id: r for r in s.scalars(select(Run))}


def test_looks_cover_every_subject_in_proportion() -> None:
    cfg = compose_eval(FAKE)
    prompt = SimpleNamespace(prefix="shots", text="shots question")
    rendered = {s: [prompt] * n for s, n in (("anatomy", 135), ("marketing", 234), ("virology", 7))}
    looks = plan.looks(rendered, 20, cfg.seed)  # type: ignore[arg-type]
    assert looks == plan.looks(rendered, 20, cfg.seed)  # type: ignore[arg-type]
    assert looks != plan.looks(rendered, 20, cfg.seed + 1)  # type: ignore[arg-type]
    for subject, ps in rendered.items():
        parts = [u.positions for look in looks for u in look if u.subject == subject]
        assert sorted(i for p in parts for i in p) == list(range(len(ps)))  # each question once
        for j in range(1, 21):  # after look j, about j/20 of every subject
            done = sum(len(u.positions) for lk in looks[:j] for u in lk if u.subject == subject)
            assert abs(done - len(ps) * j / 20) < 1
    # 57 subjects of 2 questions (limit=2) over 20 looks: every look holds some (each subject's two
    # questions half the looks apart, from its own phase), not all of them in looks 10 and 20
    small = {s: [prompt] * 2 for s in SUBJECT_NAMES}
    sizes = [sum(len(u.positions) for u in look) for look in plan.looks(small, 20, cfg.seed)]  # type: ignore[arg-type]
    assert sum(sizes) == 114
    assert min(sizes) >= 1


def test_stops_early_reports_and_resumes_to_completion(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    base_cmd = [*FAKE, f"tracking.db_url={db}"]
    baseline = run(compose_eval(base_cmd), tmp_path / "base", display=QUIET).run_id
    summary = tmp_path / "summary.md"
    cand_cmd = [*base_cmd, "gate.baseline=fake-model", *GATE]
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    proc = _cli(cli, tmp_path, *cand_cmd, f"hydra.run.dir={tmp_path / 'cand'}", env=env)
    assert proc.code == 0, proc.err
    assert "PASS ✅: non-inferiority shown at δ = 5.0 pts at look 6 of 10" in proc.out
    assert "120 of 200 questions (60 %), 80 questions saved" in proc.out
    (stopped,) = set(_runs(db)) - {baseline}
    row = _runs(db)[stopped]
    assert row.status == "stopped"
    assert json.loads(row.stop_json or "")["questions_scored"] == 120
    folder = Path(row.output_dir or "")
    assert json.loads((folder / "early_stop.json").read_text())["look"] == 6
    assert len((folder / "predictions.jsonl").read_text().splitlines()) == 120
    md = (tmp_path / "cand" / "gate" / "report.md").read_text()
    assert md.startswith("## MMLU release gate: PASS ✅")
    assert "anytime-valid 90% interval of Δ micro [" in md
    assert "(not valid after stopping on the data)" in md
    assert summary.read_text().startswith(md.partition("\n### All ")[0] + "\n<details>")
    doc = json.loads((tmp_path / "cand" / "gate" / "report.json").read_text())
    assert doc["sequential"] | {"lower": 0, "upper": 0} == doc["sequential"] | {
        "look": 6, "looks": 10, "questions_used": 120, "questions_saved": 80, "stopped_early": True,
        "lower": 0, "upper": 0,
    }  # fmt: skip
    with Session(SqlStore(db).engine) as s:
        assert [c.mode for c in s.scalars(select(ComparisonRow))] == ["sequential"]
        # Every look holds each subject in proportion: 30 of each subject's 50.
        counts = Counter(s.scalars(select(QuestionRow.subject).where(QuestionRow.run_id == stopped)))
        assert set(counts.values()) == {30}

    # The same gated command again (a re-run CI job): the recorded verdict, nothing scored or recorded.
    again = _cli(cli, tmp_path, *cand_cmd, f"hydra.run.dir={tmp_path / 'again'}")
    assert again.code == 0, again.err
    said = f"already gated: run {stopped} (fake-model), stopped by the sequential gate (pass) at look"
    assert said in again.out
    assert "recorded verdict (pass, comparison " in again.out
    assert "non-inferiority shown at δ = 5.0 pts at look 6 of 10" in again.out
    assert set(_runs(db)) == {baseline, stopped}
    assert not (tmp_path / "again").exists()  # nothing written: Hydra's folder for it is gone

    assert runs_main(["--db", db, "show", stopped]) == 0
    shown = capsys.readouterr().out
    assert "stopped early by the sequential gate (pass) at look 6 of 10, 120 of 200 questions scored" in shown
    assert "unfinished: 120 of 200 questions committed (4 subjects)" in shown

    # A stopped run is not a baseline: by id it is refused, by name the finished run is taken.
    refused = _compare(cli, tmp_path, db, f"baseline={stopped}", f"candidate={baseline}")
    assert refused.code == 2
    assert "stopped early by the sequential gate (pass) at look 6 of 10" in refused.err
    gate = GateConfig(name="default", margin=0.05, bootstrap_resamples=0)
    by_name = CompareConfig("fake-model", str(baseline), gate, TrackingConfig(db_url=db, mlflow=False))
    with pytest.raises(ComparisonError, match="has no finished run but the candidate run"):
        compare_execute(
            by_name, tmp_path / "cmp", echo=lambda _: None
        )  # the name never means the stopped run

    # The same command without the gate resumes the stopped run to completion.
    lines: list[str] = []
    run(compose_eval(base_cmd), tmp_path / "rest", display=Display(lines.append, progress=False))
    assert f"resuming run {stopped}: 120 of 200 questions were committed" in lines
    assert any(line.startswith("80 questions scored now") for line in lines), lines
    runs = _runs(db)
    assert runs[stopped].status == "finished"
    assert runs[stopped].acc_micro == runs[baseline].acc_micro  # the same model, the same answers


def _sequential(cfg: EvalConfig, out: Path, lines: list[str]) -> int:
    from mmlu_track.eval.plan import question_docs

    with sequential_gate(cfg, echo=lines.append, docs_for=question_docs) as gate:
        gated = run(cfg, out, display=Display(lines.append, progress=False), looks=gate)
        return gate.conclude(gated.run_id, out, echo=lines.append)


def test_the_fixed_sample_reading_is_called_invalid_only_after_an_early_stop() -> None:
    from mmlu_track.gate import report
    from mmlu_track.gate.stats import compare, pair

    from .test_stats import _qr

    rows = [_qr("anatomy", i, i % 2 == 0) for i in range(20)]
    comp = compare(pair(rows, rows), GateConfig(name="t", bootstrap_resamples=0))
    early, full = (report._method_lines(comp, True, {"stopped_early": s})[1] for s in (True, False))
    assert "(not valid after stopping on the data)" in early
    assert "not valid" not in full
    assert "(every look was taken: the planned sample, read once)" in full
    # deltas.png's title, with the sequential gate's line, in lines the figure can hold (it was cut)
    from mmlu_track.gate import plot

    title = plot.wrapped("m vs baseline m\nsequential gate: " + "pass at look 10 of 20, " * 8)
    assert max(map(len, title.splitlines())) <= plot.TITLE_CHARS
    assert title.startswith("m vs baseline m\nsequential gate: pass")


def test_no_decision_says_how_many_questions_would_be_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half the baseline's answers changed both ways: no decision at any look (INCONCLUSIVE, exit 1),
    and the verdict says how many questions it would take, as a fixed-sample INCONCLUSIVE does."""
    db = f"sqlite:///{tmp_path / 'store.db'}"
    over = [*FAKE, f"tracking.db_url={db}"]
    base = run(compose_eval(over), tmp_path / "base", display=QUIET)
    with Session(SqlStore(db).engine) as s, s.begin():  # as many right answers made wrong as wrong right
        rows = list(s.scalars(select(QuestionRow).where(QuestionRow.run_id == base.run_id)))
        right, wrong = [r for r in rows if r.correct], [r for r in rows if not r.correct]
        for row in [*right[::2], *wrong[::2][: len(right[::2])]]:
            row.correct = not row.correct
            row.prediction = row.gold if row.correct else (row.gold + 1) % 4
    lines: list[str] = []
    import mmlu_track.store.sql

    engines: list[str] = []  # the gate and the evaluation it observes share one SQL store
    real_open = mmlu_track.store.sql.open_engine
    monkeypatch.setattr(
        mmlu_track.store.sql, "open_engine", lambda url: engines.append(url) or real_open(url)
    )
    code = _sequential(compose_eval([*over, f"gate.baseline={base.run_id}", *GATE]), tmp_path / "c", lines)
    assert len(engines) == 1
    assert code == 1
    text = "\n".join(lines)
    assert "INCONCLUSIVE" in text
    assert "no decision after all 10 looks (200 questions)" in text
    assert "a fixed-sample gate passes two runs that differ by nothing but the observed" in text
    assert "more than this run's 200: raise limit" in text
    assert "look 10/10: 200 questions" in text
    assert "cannot show non-inferiority" not in text  # 200 questions could have, at 5 points
    assert text.count(": no decision: the run is over") == 1  # the last look's state is final
    report = json.loads(next((tmp_path / "c").rglob("report.json")).read_text())
    assert report["sequential"]["decision"] == "undecided"
    # Run again: the finished run's recorded verdict and its exit code, nothing scored or recorded.
    n_runs, again = len(_runs(db)), []
    same = compose_eval([*over, f"gate.baseline={base.run_id}", *GATE])
    assert _sequential(same, tmp_path / "d", again) == 1
    assert again[0].startswith("already evaluated: run "), again
    assert "recorded verdict (inconclusive" in again[1]
    assert again[1].endswith("(exit 1)")
    assert len(_runs(db)) == n_runs
    with Session(SqlStore(db).engine) as s:
        assert len(list(s.scalars(select(ComparisonRow)))) == 1
    # Gate settings other than the recorded verdict's: scored and gated as a run of its own.
    wider = [*over, f"gate.baseline={base.run_id}", *GATE[:2], "gate.looks=5"]
    assert _sequential(compose_eval(wider), tmp_path / "e", again) == 1
    assert len(_runs(db)) == n_runs + 1


@pytest.mark.usefixtures("mlflow_store")
def test_a_drop_stops_as_a_regression_and_bad_baselines_are_refused(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    over = [*FAKE, f"tracking.db_url={db}"]
    base = run(compose_eval(over), tmp_path / "base", display=QUIET)
    with Session(SqlStore(db).engine) as s, s.begin():  # a baseline that knew every answer
        s.execute(update(QuestionRow).values(prediction=QuestionRow.gold, correct=True))
    lines: list[str] = []
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logged = [*over, "tracking.mlflow=true", f"tracking.mlflow_uri={uri}"]
    code = _sequential(compose_eval([*logged, f"gate.baseline={base.run_id}", *GATE]), tmp_path / "c", lines)
    assert code == 1
    assert any("REGRESSION ❌: a drop shown at look 1 of 10" in line for line in lines), lines
    assert any(
        line.startswith("look 1/10: 20 questions, ") and line.endswith(": regression") for line in lines
    )
    (stopped,) = [r for r in _runs(db).values() if r.status == "stopped"]

    # In MLflow the stopped run says so in its name and tags; resumed to completion, it no longer does.
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    seen = client.get_run(str(stopped.mlflow_run_id))
    assert seen.info.run_name.startswith("stopped (regression at look 1/10, 20/200 q) fake-model")
    assert seen.data.tags["mmlu_track.early_stop"] == "regression at look 1/10, 20/200 q"
    assert f"gated against run {base.run_id}" in seen.data.tags["mmlu_track.early_stop_reason"]
    assert seen.info.end_time is not None  # a duration in the runs table
    assert seen.data.tags["mlflow.note.content"].startswith("Stopped by the sequential gate: ")
    assert seen.data.metrics["stopped/questions"] == 20  # apart from a full run's acc_micro
    assert "acc_micro" not in seen.data.metrics
    artifacts = {a.path for a in client.list_artifacts(seen.info.run_id)}
    assert artifacts == {"predictions.jsonl.gz", "early_stop.json"}
    # The comparison's page carries the verdict's own numbers: the anytime-valid interval under
    # gate/, the fixed-sample one under reference/ (issue 42).
    (gated,) = client.search_runs([client.get_experiment_by_name("mmlu_track_compare").experiment_id])
    section = json.loads(next((tmp_path / "c").rglob("report.json")).read_text())["sequential"]
    metrics = gated.data.metrics
    assert metrics["gate/ci_low_micro_pts"] == pytest.approx(100 * section["lower"])
    assert metrics["sequential/ci_low_pts"] == pytest.approx(100 * section["lower"])
    assert "reference/fixed_sample_ci_low_micro_pts" in metrics
    # the questions the look used, each with its text, in the comparison's table
    got = client.download_artifacts(gated.info.run_id, "paired_questions.json", str(tmp_path / "t"))
    table = json.loads(Path(got).read_text())
    assert len(table["data"]) == 20
    assert all(row[table["columns"].index("question")] for row in table["data"])
    assert any("anytime-valid interval [" in line and "REGRESSION" in line for line in lines)
    run(compose_eval(logged), tmp_path / "rest", display=QUIET)
    seen = client.get_run(str(stopped.mlflow_run_id))
    assert seen.info.run_name.startswith("fake-model")
    assert seen.data.tags["mlflow.note.content"].startswith("Micro accuracy ")
    assert not {"mmlu_track.early_stop", "mmlu_track.early_stop_reason"} & set(seen.data.tags)
    assert "acc_micro" in seen.data.metrics
    # The same gated command with tracking.rerun=true scores again: a run of its own, told apart in MLflow.
    rerun = compose_eval([*logged, f"gate.baseline={base.run_id}", *GATE, "tracking.rerun=true"])
    assert _sequential(rerun, tmp_path / "f", lines) == 1
    (again,) = [r for r in _runs(db).values() if r.status == "stopped"]
    assert "rerun: fake-model" in client.get_run(str(again.mlflow_run_id)).info.run_name

    # Refused before any run is recorded: an unknown reference, a baseline with other settings.
    n_runs = len(_runs(db))
    with pytest.raises(ComparisonError, match="unknown run 'nope'"):
        _sequential(compose_eval([*over, "gate.baseline=nope", *GATE]), tmp_path / "d", lines)
    other_k = [o if not o.startswith("k=") else "k=1" for o in over]
    with pytest.raises(ComparisonError, match="not comparable: k differs"):
        _sequential(compose_eval([*other_k, f"gate.baseline={base.run_id}", *GATE]), tmp_path / "e", lines)
    assert len(_runs(db)) == n_runs


@pytest.mark.slow  # the packaged SmolLM2-135M, converted and run
def test_the_default_model_stops_early_against_its_stored_run(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    over = ["device=cpu", "k=0", "limit=3", SUBJECTS, "tracking=sql_only", f"tracking.db_url={db}"]
    base = run(compose_eval(over), tmp_path / "base", display=QUIET)
    lines: list[str] = []
    cfg = compose_eval([*over, f"gate.baseline={base.run_id}", "gate.sequential=true", "gate.margin=0.5",
                        "gate.looks=4"])  # fmt: skip
    assert _sequential(cfg, tmp_path / "cand", lines) == 0
    assert any("decided at look 3 of 4 on 10 of 12 questions" in line for line in lines), "\n".join(lines)
    assert sorted(r.status for r in _runs(db).values()) == ["finished", "stopped"]
