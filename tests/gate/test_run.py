"""`python -m mmlu_track.compare` end to end on runs in a real SQLite store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from mmlu_track.store.orm import ComparisonRow
from mmlu_track.store.sql import SqlStore

from ..conftest import CliResult, synthetic_run

Cli = Callable[..., CliResult]

SUBJECTS = ("anatomy", "virology", "college_physics", "philosophy", "marketing")


def _correct(seed: int, n: int = 200, p: float = 0.6) -> dict[str, list[bool]]:
    rng = np.random.default_rng(seed)
    return {s: [bool(v) for v in rng.random(n) < p] for s in SUBJECTS}


def _degrade(
    correct: dict[str, list[bool]], subject: str | None, share: float, seed: int
) -> dict[str, list[bool]]:
    """Turn `share` of the right answers wrong, in one subject or in all."""
    rng = np.random.default_rng(seed)
    out = {}
    for s, flags in correct.items():
        hit = subject is None or s == subject
        out[s] = [ok and not (hit and rng.random() < share) for ok in flags]
    return out


def _compare(cli: Cli, tmp_path: Path, db: str, *args: str, env: dict[str, str] | None = None) -> CliResult:
    """`python -m mmlu_track.compare` in-process, reporting into a fresh folder: the first call's
    into report/, the next ones' into report-2/, report-3/, ..."""
    folder, n = tmp_path / "report", 1
    while folder.exists():
        n += 1
        folder = tmp_path / f"report-{n}"
    return cli("compare", f"tracking.db_url={db}", "tracking.mlflow=false", f"hydra.run.dir={folder}", *args,
               cwd=tmp_path, env=env)  # fmt: skip


def _reports(got: CliResult) -> Path:
    """The folder a compare says it wrote its reports into."""
    return Path(got.out.split("reports in ")[1].splitlines()[0])


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_identical_runs_pass_and_write_every_report(cli: Cli, tmp_path: Path, db: str) -> None:
    store = SqlStore(db)
    base = synthetic_run(store, "m-base", _correct(1))
    cand = synthetic_run(store, "m-cand", _correct(1))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    proc = _compare(
        cli, tmp_path, db, f"baseline={base}", f"candidate={cand}", env={"GITHUB_STEP_SUMMARY": str(summary)}
    )
    assert proc.code == 0, proc.err
    assert "PASS" in proc.out
    report = tmp_path / "report"
    md = (report / "report.md").read_text()
    assert md.startswith("## MMLU release gate: PASS ✅: non-inferiority shown at δ = 1.0 pts")
    assert "\nExit code 0: does not block the release.\n" in md  # said below, not in the heading
    assert "No subject has a changed answer." in md  # not a table of +0.00 rows
    # MLflow's artifact viewer shows raw HTML as text: report.md lists every subject; GitHub's job
    # summary, which renders HTML, folds the same as a table
    assert "<details>" not in md
    body, _, listed = md.partition("\n### All ")
    assert listed.startswith("5 subjects, sorted by Δ\n")
    assert listed.count("\n- ") == 5
    assert summary.read_text().startswith("earlier step\n" + body + "\n<details><summary>All 5 subjects")
    doc = json.loads((report / "report.json").read_text())
    assert doc["verdict"]["exit_code"] == 0
    assert doc["micro"]["delta"] == 0.0
    assert (report / "deltas.png").read_bytes()[:4] == b"\x89PNG"
    with Session(store.engine) as s:
        (row,) = s.scalars(select(ComparisonRow))
        assert (row.baseline_run_id, row.candidate_run_id, row.verdict) == (base, cand, "pass")


def test_regression_fails_and_warn_only_passes(cli: Cli, tmp_path: Path, db: str) -> None:
    store = SqlStore(db)
    good = _correct(2)
    base = synthetic_run(store, "m-base", good)
    cand = synthetic_run(store, "m-cand", _degrade(good, None, 0.10, seed=3))
    proc = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={cand}")
    assert proc.code == 1, proc.err
    assert "REGRESSION" in proc.out
    assert proc.out.startswith("REGRESSION ❌: significant overall drop")
    assert "non-inferiority at δ = 1.0 pts not shown" in proc.out
    warn = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={cand}", "gate=warn_only")
    assert warn.code == 0
    assert "REGRESSION" in warn.out


def test_one_subject_collapsing_is_flagged_and_fails_the_strict_policy(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    store = SqlStore(db)
    good = _correct(4, n=300)
    base = synthetic_run(store, "m-base", good)
    cand = synthetic_run(store, "m-cand", _degrade(good, "virology", 0.5, seed=5))
    strict = _compare(
        cli, tmp_path, db, f"baseline={base}", f"candidate={cand}", "gate=strict", "gate.margin=0.05"
    )
    assert strict.code == 1, strict.err
    assert "regressed significantly: virology" in strict.out
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [s["name"] for s in doc["subjects"] if s["flagged"]] == ["virology"]
    assert "⚠️ virology" in (tmp_path / "report" / "report.md").read_text()


def test_model_names_resolve_to_their_latest_comparable_run(cli: Cli, tmp_path: Path, db: str) -> None:
    store = SqlStore(db)
    synthetic_run(store, "m-base", _correct(6), k=0)  # other settings: never picked against k=5
    base = synthetic_run(store, "m-base", _correct(6))
    cand = synthetic_run(store, "m-cand", _correct(6))
    proc = _compare(cli, tmp_path, db, "baseline=m-base", f"candidate={cand[:12]}")
    assert proc.code == 0, proc.err
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert (doc["baseline"]["id"], doc["candidate"]["id"]) == (base, cand)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (
            {"k": 0},
            "k differs (baseline 5, candidate 0); to measure the few-shot gap between them, add mode=",
        ),
        ({"fingerprint": "e" * 64}, "questions differ (baseline 1000 questions, data fingerprint ffff"),
        ({"formulation": "harness"}, "formulation differs"),
    ],
)
def test_incomparable_runs_exit_2(
    cli: Cli, tmp_path: Path, db: str, setup: dict[str, object], message: str
) -> None:
    store = SqlStore(db)
    base = synthetic_run(store, "m-base", _correct(8))
    cand = synthetic_run(store, "m-cand", _correct(8), **setup)  # type: ignore[arg-type]
    proc = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={cand}")
    assert proc.code == 2
    assert message in proc.err
    assert "Traceback" not in proc.err


def test_unknown_and_missing_runs_exit_2(cli: Cli, tmp_path: Path, db: str) -> None:
    SqlStore(db)
    proc = _compare(cli, tmp_path, db, "baseline=nothing-here", "candidate=nothing-either")
    assert proc.code == 2
    assert "unknown run 'nothing-either'" in proc.err  # the candidate is resolved first
    missing = _compare(cli, tmp_path, db, "candidate=x")
    assert missing.code == 2
    assert "Missing mandatory value: baseline" in missing.err


def test_fewshot_gap_reports_per_subject_and_category(cli: Cli, tmp_path: Path, db: str) -> None:
    store = SqlStore(db)
    zero = _correct(9, p=0.4)
    five = {s: [a or (s == "philosophy" and i % 2 == 0) for i, a in enumerate(v)] for s, v in zero.items()}
    k0 = synthetic_run(store, "m", zero, k=0)
    k5 = synthetic_run(store, "m", five, k=5)
    proc = _compare(cli, tmp_path, db, f"baseline={k0}", f"candidate={k5}", "mode=fewshot_gap")
    assert proc.code == 0, proc.err
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.startswith("## MMLU few-shot gap: ANALYSIS 📊")
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    gaps = {s["name"]: s for s in doc["subjects"]}
    assert gaps["philosophy"]["delta"] > 0.1
    assert gaps["philosophy"]["improved"]
    assert {c["name"] for c in doc["categories"]} >= {"humanities", "STEM"}
    same_k = _compare(cli, tmp_path, db, f"baseline={k0}", f"candidate={k0}", "mode=fewshot_gap")
    assert same_k.code == 2


@pytest.mark.usefixtures("mlflow_store")
def test_comparison_logged_to_mlflow_and_alias_names_the_baseline(cli: Cli, tmp_path: Path, db: str) -> None:
    from mlflow.tracking import MlflowClient

    store = SqlStore(db)
    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=mlflow_uri)
    exp = client.create_experiment("evals")
    base = synthetic_run(store, "m-base", _correct(10))
    cand = synthetic_run(store, "m-cand", _correct(10))
    mlflow_base = client.create_run(exp).info.run_id
    store.set_mlflow_run(base, mlflow_base, synced=True)
    client.create_registered_model("mmlu-model")
    version = client.create_model_version("mmlu-model", f"runs:/{mlflow_base}/model", run_id=mlflow_base)
    client.set_registered_model_alias("mmlu-model", "champion", version.version)
    proc = _compare(
        cli, tmp_path, db, "baseline=models:/mmlu-model@champion", f"candidate={cand}",
        "tracking.mlflow=true", f"tracking.mlflow_uri={mlflow_uri}",
    )  # fmt: skip
    assert proc.code == 0, proc.err
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert doc["baseline"]["id"] == base
    with Session(store.engine) as s:
        (row,) = s.scalars(select(ComparisonRow))
    assert row.mlflow_run_id is not None
    logged = client.get_run(row.mlflow_run_id)
    assert logged.data.metrics["gate/delta_micro_pts"] == 0.0  # points, as the report says them
    assert logged.data.metrics["candidate/acc_micro"] == float(f"{doc['micro']['candidate_acc']:.4g}")
    assert logged.data.params["baseline_mlflow_run"] == mlflow_base  # a comparison leads to its runs
    assert logged.info.run_name == "PASS: m-cand vs baseline m-base"  # the verdict, then what differs
    # First line plain (the comparisons' table shows it as written), then what differs, the reasons,
    # the exit code and the overall rows as a list: MLflow renders a description's table as run-together text
    first, head = logged.data.tags["mlflow.note.content"].split("\n\n", maxsplit=1)
    assert first == (
        "PASS: Δ micro +0.00 pts [-0.38, +0.38], 0 lost / 0 gained · baseline 60.80 % → candidate 60.80 % "
        "(1,000 paired questions)"
    )
    assert head.startswith("**m-cand vs baseline m-base**\n\n- non-inferiority at δ = 1.0 pts shown")
    assert "\nExit code 0: does not block the release.\n" in head
    assert "\n- micro (1000 q): 60.80 → 60.80 %, Δ +0.00 pts [-0.38, +0.38], 0 lost / 0 gained\n" in head
    assert "|" not in head
    tags = client.get_experiment(logged.info.experiment_id).tags
    view = json.loads(tags["mlflow.sharedViewState.mmlu_track"])
    assert "metrics.`gate/delta_micro_pts`" in json.loads(view["state"])["selectedColumns"]
    assert "What differs: model m-base → m-cand." in logged.data.tags["mlflow.note.content"]
    zero_shot = synthetic_run(store, "m-cand", _correct(11), k=0)
    cand_logged = client.create_run(exp).info.run_id
    store.set_mlflow_run(cand, cand_logged, synced=True)
    gap = _compare(cli, tmp_path, db, f"baseline={zero_shot}", f"candidate={cand}", "mode=fewshot_gap",
                   "tracking.mlflow=true", f"tracking.mlflow_uri={mlflow_uri}")  # fmt: skip
    assert gap.code == 0, gap.err
    with Session(store.engine) as s:
        gap_id = next(r.mlflow_run_id for r in s.scalars(select(ComparisonRow)) if r.mode == "fewshot_gap")
    gap_run = client.get_run(gap_id)  # an analysis: no verdict-bearing names, no policy
    assert gap_run.info.run_name == "Few-shot gap of m-cand: k=5 vs k=0"
    assert {k.split("/")[0] for k in gap_run.data.metrics} == {"gap", "baseline", "candidate"}
    assert "policy" not in gap_run.data.params
    assert "margin_pts" not in gap_run.data.params
    assert "mmlu_track.gate" not in client.get_run(cand_logged).data.tags  # an analysis is no gate (issue 42)
    assert {a.path for a in client.list_artifacts(row.mlflow_run_id)} == {
        "report.md",
        "report.json",
        "paired_questions.json",
        "deltas.png",
    }
    # A pass promotes the candidate: the next gate's baseline by alias is the model that last passed.
    store.set_mlflow_run(cand, client.create_run(exp).info.run_id, synced=True)
    promote = ("gate.promote_alias=champion", "gate.registered_model=mmlu-model")
    promoted = _compare(
        cli, tmp_path, db, "baseline=models:/mmlu-model@champion", f"candidate={cand}", *promote,
        "tracking.mlflow=true", f"tracking.mlflow_uri={mlflow_uri}",
    )  # fmt: skip
    assert promoted.code == 0, promoted.err
    assert "promoted: mmlu-model@champion -> version 2" in promoted.out
    promoted_run = store.get(cand)
    assert promoted_run is not None
    assert client.get_model_version_by_alias("mmlu-model", "champion").run_id == promoted_run.mlflow_run_id
    # the candidate's own run leads to its latest verdict
    tag = client.get_run(str(promoted_run.mlflow_run_id)).data.tags["mmlu_track.gate"]
    assert tag.startswith("PASS vs baseline m-base@seed0-k5-logprob-float32 (comparison run ")
    comparison = tag.rstrip(")").rpartition(" ")[2]  # and its description links to it
    note = client.get_run(str(promoted_run.mlflow_run_id)).data.tags["mlflow.note.content"]
    assert f"/runs/{comparison}?workflowType=machine_learning)" in note  # on the machine-learning pages
    assert (
        note.count("**Latest gate:** [PASS vs baseline m-base@seed0-k5-logprob-float32](#/experiments/") == 1
    )
    unlogged = synthetic_run(store, "m-new", _correct(10))
    refused = _compare(cli, tmp_path, db, f"baseline={cand}", f"candidate={unlogged}", promote[0],
                       f"tracking.mlflow_uri={mlflow_uri}")  # fmt: skip
    assert refused.code == 2
    assert "cannot promote m-new@champion: the candidate run" in refused.err
    bad_alias = _compare(cli, tmp_path, db, "baseline=models:/mmlu-model@nope", f"candidate={cand}",
                         f"tracking.mlflow_uri={mlflow_uri}")  # fmt: skip
    assert bad_alias.code == 2
    assert "no MLflow model version for models:/mmlu-model@nope" in bad_alias.err


def test_an_unfinished_run_is_refused(cli: Cli, tmp_path: Path, db: str) -> None:
    from ..conftest import synthetic_start

    store = SqlStore(db)
    base = synthetic_run(store, "m-base", _correct(12))
    cand, _ = store.start_or_resume(synthetic_start(model="m-cand", n_questions=1000), "half")
    proc = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={cand}")
    assert proc.code == 2
    assert f"the candidate run {cand} is running, not finished" in proc.err


def _same(subjects: int, per_subject: int) -> dict[str, list[bool]]:
    from mmlu_track.settings.subjects import SUBJECTS

    return {s: [i % 2 == 0 for i in range(per_subject)] for s in SUBJECTS[:subjects]}


@pytest.mark.parametrize(
    ("subjects", "per_subject", "needed"),
    [(57, 2, "299 questions are needed"), (2, 3, "299 questions are needed")],  # quick (114 q), smoke (6 q)
)
def test_no_change_on_few_questions_is_inconclusive_not_a_pass(
    cli: Cli, tmp_path: Path, db: str, *, subjects: int, per_subject: int, needed: str
) -> None:
    store = SqlStore(db)
    base = synthetic_run(store, "m-fp32", _same(subjects, per_subject))
    cand = synthetic_run(store, "m-bf16", _same(subjects, per_subject))
    proc = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={cand}")
    assert proc.code == 1, proc.err
    first = proc.out.splitlines()[0]
    assert first.startswith("INCONCLUSIVE ⚠️: too few questions to tell")
    assert first.endswith("(exit 1)")
    assert needed in proc.out
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.splitlines()[0] == f"## MMLU release gate: {first.removesuffix(' (exit 1)')}"
    assert "\nExit code 1: blocks the release.\n" in md
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert doc["verdict"]["status"] == "inconclusive"
    assert doc["noninferiority"]["questions_needed"] == 299  # where two identical runs first pass
    assert -1 < doc["micro"]["ci_low"] < 0 < doc["micro"]["ci_high"] < 1  # never [0, 0]
    with Session(store.engine) as s:
        (row,) = s.scalars(select(ComparisonRow))
        assert row.verdict == "inconclusive"


def test_a_small_pass_reads_without_contradiction(cli: Cli, tmp_path: Path, db: str) -> None:
    """0 lost and 2 gained of 114: a PASS (issue 25). Its report shows the two changed subjects (not
    ten unchanged ones), no bold where nothing is significant, and says that the table's two-sided
    interval reaching below −δ is not what the verdict compares."""
    store = SqlStore(db)
    good = _same(57, 2)
    better = {s: list(v) for s, v in good.items()}
    changed = list(better)[10:12]
    for s in changed:
        better[s][1] = True  # +50 points in each: 1 of 2 questions gained
    base = synthetic_run(store, "m-fp32", good)
    cand = synthetic_run(store, "m-bf16", better)
    got = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={cand}", "gate.bootstrap_resamples=0")
    assert got.code == 0, got.out
    md = (_reports(got) / "report.md").read_text()
    table = md.split("### Subjects")[1].split("### All")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    # in words, where MLflow's narrow equal columns can wrap them (an identifier broke mid-word)
    words = [s.replace("_", " ") for s in sorted(changed)]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows] == words
    assert not [line for line in md.splitlines() if line.startswith("| ") and "**" in line]
    micro = json.loads((_reports(got) / "report.json").read_text())["micro"]
    assert micro["ci_low"] < -0.01 < micro["ci_high"]  # the two-sided interval reaches below −δ ...
    assert "are two-sided: their lower ends sit below this bound by design" in md  # ... and says why
    assert "What differs: model m-fp32 → m-bf16." in md  # what the reviewer must know first


def test_noise_on_285_questions_is_inconclusive_not_a_regression(cli: Cli, tmp_path: Path, db: str) -> None:
    store = SqlStore(db)
    good = _same(57, 5)
    noisy = {s: list(v) for s, v in good.items()}
    subjects = list(noisy)
    for s in subjects[:3]:  # 3 lost
        noisy[s][0] = False
    for s in subjects[3:7]:  # 4 gained
        noisy[s][1] = True
    base = synthetic_run(store, "m-fp32", good)
    cand = synthetic_run(store, "m-bf16", noisy)
    proc = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={cand}", "gate.bootstrap_resamples=0")
    assert proc.code == 1, proc.err
    assert proc.out.startswith("INCONCLUSIVE ⚠️")
    assert "REGRESSION" not in proc.out
    assert "3 lost and 4 gained of 285 questions" in proc.out


def test_intervals_stay_inside_minus_100_to_100_at_two_questions(cli: Cli, tmp_path: Path, db: str) -> None:
    store = SqlStore(db)
    base = synthetic_run(store, "m-base", {"anatomy": [True, True], "virology": [True, False]})
    cand = synthetic_run(store, "m-cand", {"anatomy": [False, False], "virology": [True, False]})
    proc = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={cand}")
    assert proc.code == 1, proc.err
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    rows = {s["name"]: s for s in doc["subjects"]}
    assert rows["anatomy"]["delta"] == -1.0
    assert rows["anatomy"]["ci_low"] == -1.0 < rows["anatomy"]["ci_high"] < 1  # not the point -1
    assert -1 < rows["virology"]["ci_low"] < 0 < rows["virology"]["ci_high"] < 1
    for d in (*doc["subjects"], *doc["categories"], doc["micro"], doc["macro"]):
        assert -1 <= d["ci_low"] <= d["delta"] <= d["ci_high"] <= 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["gate=nonsense"], "Could not find 'gate/nonsense'"),
        (["gate.marging=0.02"], "unknown key 'gate.marging': did you mean gate.margin?"),
        (["margin=0.02"], "unknown key 'margin': did you mean gate.margin?"),
        (["gate.margin=2"], "gate.margin=2.0 must be in [0, 1)"),
        (["mode=gap"], "mode='gap' is not allowed"),
    ],
)
def test_a_typo_never_exits_1(cli: Cli, tmp_path: Path, db: str, args: list[str], message: str) -> None:
    store = SqlStore(db)
    base = synthetic_run(store, "m-base", _correct(1))
    proc = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={base}", *args)
    assert proc.code == 2, proc.out + proc.err
    assert message in proc.err
    assert "Traceback" not in proc.err


def test_model_name_lookup_uses_the_gates_definition_of_comparable(cli: Cli, tmp_path: Path, db: str) -> None:
    store = SqlStore(db)
    k0 = synthetic_run(store, "m", _correct(20), k=0)
    k5 = synthetic_run(store, "m", _correct(20), k=5)
    gap = _compare(cli, tmp_path, db, "baseline=m", f"candidate={k5}", "mode=fewshot_gap")
    assert gap.code == 0, gap.err
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert (doc["baseline"]["id"], doc["candidate"]["id"]) == (k0, k5)

    plain = synthetic_run(store, "m-base", _correct(21))
    calibrated_base = synthetic_run(store, "m-base", _correct(21), calibration="mean")
    synthetic_run(store, "m-base", _correct(21))  # newest, but not calibrated: never picked
    cand = synthetic_run(store, "m-cand", _correct(21), calibration="mean")
    proc = _compare(cli, tmp_path, db, "baseline=m-base", f"candidate={cand}")
    assert proc.code == 0, proc.err
    doc = json.loads((_reports(proc) / "report.json").read_text())  # report-2/: report/ holds the gap's
    assert doc["baseline"]["id"] == calibrated_base != plain

    other = synthetic_run(store, "m-other", _correct(21))
    none = _compare(cli, tmp_path, db, "baseline=m-other", f"candidate={cand}")
    assert none.code == 2
    expected = (
        f"none of the 1 other finished runs of 'm-other' is comparable with the candidate run {cand[:12]}"
    )
    assert expected in none.err
    assert other not in none.out


def test_run_references_ambiguous_numeric_and_self(cli: Cli, tmp_path: Path, db: str) -> None:
    store = SqlStore(db)
    ids = [synthetic_run(store, f"m{i}", {"anatomy": [True, False]}) for i in range(17)]
    prefix = next(a[0] for a in ids if sum(b[0] == a[0] for b in ids) > 1)  # 17 ids, 16 first digits
    amb = _compare(cli, tmp_path, db, f"baseline={prefix}", f"candidate={ids[0]}")
    assert amb.code == 2
    assert f"'{prefix}' matches" in amb.err
    assert "give more of the id" in amb.err
    assert sum(i[:12] in amb.err for i in ids if i.startswith(prefix)) >= 2

    # A store of their own: among the 17 random ids above, one may start with 1e5 (a flake: 1 in ~240)
    numeric_db = f"sqlite:///{tmp_path / 'numeric.db'}"
    synthetic_run(SqlStore(numeric_db), "8809", _correct(30))
    synthetic_run(SqlStore(numeric_db), "1e5", _correct(30))
    numeric = _compare(cli, tmp_path, numeric_db, "baseline=8809", "candidate=1e5")
    assert numeric.code == 0, numeric.err
    doc = json.loads((_reports(numeric) / "report.json").read_text())  # a fresh folder, not report/
    assert (doc["baseline"]["model"], doc["candidate"]["model"]) == ("8809", "1e5")

    same = _compare(cli, tmp_path, db, f"baseline={ids[0]}", f"candidate={ids[0]}")
    assert same.code == 2
    assert f"baseline and candidate are the same run {ids[0][:12]}" in same.err


def test_fewshot_gap_is_an_analysis_with_gains_and_losses_visible(cli: Cli, tmp_path: Path, db: str) -> None:
    from mmlu_track.settings.subjects import SUBJECTS

    rng = np.random.default_rng(31)
    names = SUBJECTS[:20]
    zero = {s: [bool(v) for v in rng.random(60) < 0.4] for s in names}
    # Shots help the first ten subjects a lot and hurt the last two.
    five = {
        s: [a or (i < 10 and j % 2 == 0) for j, a in enumerate(v)] if i < 18 else [False] * 60
        for i, (s, v) in enumerate(zero.items())
    }
    k0 = synthetic_run(store := SqlStore(db), "m", zero, k=0)
    k5 = synthetic_run(store, "m", five, k=5)
    proc = _compare(cli, tmp_path, db, f"baseline={k0}", f"candidate={k5}", "mode=fewshot_gap")
    assert proc.code == 0, proc.err
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.startswith("## MMLU few-shot gap: ANALYSIS 📊: few-shot gap Δ micro")
    table = md.split("### All")[0]
    for absent in ("Non-inferiority", "policy", "δ", "exit", "Exit"):
        assert absent not in table
    assert names[19].replace("_", " ") in table  # the biggest loss ...
    assert names[0].replace("_", " ") in table  # ... and a big gain
    assert "Non-inferiority" not in proc.out


def test_an_unreadable_store_exits_2(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "not-a-database.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    proc = _compare(cli, tmp_path, f"sqlite:///{bad}", "baseline=a", "candidate=b")
    assert proc.code == 2
    assert "cannot be opened: file is not a database" in proc.err
    assert "Traceback" not in proc.err
    helped = _compare(cli, tmp_path, f"sqlite:///{bad}", "--help")
    assert helped.code == 0


def test_report_links_both_runs_in_the_mlflow_ui(cli: Cli, tmp_path: Path, db: str) -> None:
    store = SqlStore(db)
    base = synthetic_run(store, "m-base", _correct(40))
    cand = synthetic_run(store, "m-cand", _correct(40))
    store.set_mlflow_run(base, "b" * 32, synced=True)
    store.set_mlflow_run(cand, "c" * 32, synced=True)
    server = "http://mlflow.example:5000"
    proc = _compare(
        cli, tmp_path, db, f"baseline={base}", f"candidate={cand}", f"tracking.mlflow_uri={server}"
    )
    assert proc.code == 0, proc.err
    md = (tmp_path / "report" / "report.md").read_text()
    assert (
        f"MLflow: [baseline run]({server}/#/runs/{'b' * 32}) · [candidate run]({server}/#/runs/{'c' * 32})"
        in md
    )
    # A server named by MLFLOW_TRACKING_URI alone (the config left as asked) is linked the same way.
    env = {"MLFLOW_TRACKING_URI": server}
    again = _compare(cli, tmp_path, db, f"baseline={base}", f"candidate={cand}", env=env)
    assert again.code == 0, again.err
    assert f"[baseline run]({server}/#/runs/{'b' * 32})" in (tmp_path / "report-2" / "report.md").read_text()
