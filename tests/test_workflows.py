"""The workflows: the gate's `run:` steps, run here with a simulated GITHUB_OUTPUT and
GITHUB_STEP_SUMMARY; the test workflow, which is `.ci/run` and nothing else; actionlint over all."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmlu_track.store.sql import SqlStore

from .conftest import ROOT, synthetic_run, unavailable


def _step(workflow: str, step_id: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / workflow).read_text())
    steps = [s for job in doc["jobs"].values() for s in job.get("steps", [])]
    return next(s for s in steps if s.get("id") == step_id)


def _run_step(step: dict[str, Any], tmp_path: Path, env: dict[str, str]) -> tuple[int, dict[str, str], str]:
    output, summary = tmp_path / "github_output", tmp_path / "github_summary"
    output.write_text("")
    summary.write_text("")
    # GitHub runs `run:` with bash -e -o pipefail; `${{ … }}` expressions are set through env here.
    env = {**os.environ, **env, "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)}
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return proc.returncode, outputs, summary.read_text()


@pytest.mark.parametrize(
    "case",
    [
        (200, "default", 0, "pass", "## MMLU release gate: PASS ✅"),
        (2, "default", 1, "inconclusive", "## MMLU release gate: INCONCLUSIVE ⚠️"),
        (2, "warn_only", 0, "inconclusive", "## MMLU release gate: INCONCLUSIVE ⚠️"),
        (200, "defualt", 2, None, ""),  # a typo in the policy is unusable input, never a regression
    ],
)
def test_compare_step_outputs_exit_code_verdict_and_summary(
    tmp_path: Path, case: tuple[int, str, int, str | None, str]
) -> None:
    per_subject, policy, code, verdict, summary_start = case
    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(db)
    correct = {s: [i % 3 == 0 for i in range(per_subject)] for s in ("anatomy", "virology")}
    base = synthetic_run(store, "m-base", correct)
    cand = synthetic_run(store, "m-cand", correct)
    step = _step("mmlu-gate.yml", "compare")
    env = {"MODEL": cand, "BASELINE": base, "POLICY": policy, "MARGIN": "0.01", "MMLU_TRACK_DB_URL": db,
           "MLFLOW_URI": "", "HYDRA_FULL_ERROR": ""}  # fmt: skip
    rc, outputs, summary = _run_step(step, tmp_path, env)
    assert rc == code
    assert outputs["exit-code"] == str(code)
    assert outputs.get("verdict") == verdict
    assert summary.startswith(summary_start)


@pytest.mark.slow  # four interpreters with torch and a saved model, two runs and a gate: ~30 s
def test_evaluate_step_runs_a_sharded_evaluation_and_the_sequential_gate(tmp_path: Path) -> None:
    """The gate's evaluation step with shards=2 on a saved (tiny, random) model, through the joblib
    launcher (the project's test of that launcher): one finished run of each question once, logged
    once to MLflow; then with sequential: true against it."""
    from mlflow.tracking import MlflowClient

    from mmlu_track.eval import models

    from .conftest import compose_eval

    lm = models.load_model(compose_eval(["model=tiny", "device=cpu"]))
    saved = tmp_path / "candidate"
    lm.model.save_pretrained(saved)
    lm.tokenizer.save_pretrained(saved)
    db, mlflow_uri = f"sqlite:///{tmp_path / 'store.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = "device=cpu k=0 limit=10 subjects=[anatomy,virology]"
    env = {"MODEL": str(saved), "SHARDS": "2", "MMLU_TRACK_DB_URL": db, "MLFLOW_URI": mlflow_uri,
           "EVAL_ARGS": f"{args} hydra.sweep.dir=sweep", "SEQUENTIAL": "false"}  # fmt: skip
    rc, _, _ = _run_step(_step("mmlu-gate.yml", "evaluate"), tmp_path, env)
    assert rc == 0
    (run,) = SqlStore(db).runs()
    assert run.status == "finished"
    assert run.n_questions == 20
    assert run.model_name == str(saved)
    assert (tmp_path / "sweep" / "results.json").is_file()  # finalized once, in the sweep's folder
    assert not list((tmp_path / "sweep").glob("*/results.json"))
    client = MlflowClient(tracking_uri=mlflow_uri)
    (logged,) = client.search_runs([client.get_experiment_by_name("mmlu_track").experiment_id])
    assert logged.info.status == "FINISHED"
    assert logged.data.metrics["acc_micro"] == pytest.approx(run.acc_micro, rel=1e-3)
    # its questions each once (a sharded run equals the unsharded one: pipeline/test_session_shards.py)
    sharded = SqlStore(db).question_results(run.id)
    assert len({(r.subject, r.index) for r in sharded}) == len(sharded) == 20

    # sequential: true: the same step gates against that run and stops at look 2 of 4 (a plumbing
    # check: the same weights give the same answers, and δ = 50 points is shown in 10 questions).
    env |= {"SHARDS": "1", "EVAL_ARGS": args, "SEQUENTIAL": "true", "BASELINE": str(saved),
            "POLICY": "default", "MARGIN": "0.5", "LOOKS": "4"}  # fmt: skip
    rc, outputs, summary = _run_step(_step("mmlu-gate.yml", "evaluate"), tmp_path, env)
    assert rc == 0
    assert outputs == {"exit-code": "0", "verdict": "pass"}
    assert summary.startswith("## MMLU release gate: PASS ✅: non-inferiority shown at δ = 50.0 pts at look")
    assert (tmp_path / "compare-report" / "report.json").is_file()
    assert sorted(r.status for r in SqlStore(db).runs()) == ["finished", "stopped"]


def test_workflows_pass_actionlint() -> None:
    exe = shutil.which("actionlint")
    if exe is None:
        unavailable("actionlint is not installed (pip install -e '.[dev]' brings it)")
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert {p.rsplit("/", 1)[1] for p in workflows} >= {"test.yml", "release-gate.yml", "mmlu-gate.yml"}
    proc = subprocess.run(
        [exe, *workflows], cwd=ROOT, capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


CI_RUN = ROOT / ".ci" / "run"


def _test_job() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "test.yml").read_text())
    (job,) = doc["jobs"].values()
    return dict(job)


def test_the_test_workflow_is_ci_run_and_nothing_else() -> None:
    """One definition of the test job: test.yml gives .ci/run a Python 3.11 and root, and installs,
    starts and runs nothing itself (its own copy of the steps installed none of the services that
    GitHub's CI=true turns from skips into failures)."""
    job = _test_job()
    steps = job["steps"]
    python = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert python["with"]["python-version"] == "3.11"
    script = "\n".join(s["run"] for s in steps if "run" in s)
    assert re.search(r'^sudo -E env "PATH=\$PATH" bash \.ci/run$', script, flags=re.M)
    for own in ("pip install", "pytest", "ruff", "mypy", "apt-get", "useradd"):
        assert own not in script, f"test.yml runs {own} itself: it belongs in .ci/run"
    # PyTorch's CPU index beside PyPI: .ci/run's plain torch==2.13.0 resolves to 2.13.0+cpu there.
    assert job["env"]["PIP_EXTRA_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert "PIP_INDEX_URL" not in job["env"]  # PyPI stays the index for everything else
    ci = CI_RUN.read_text()
    assert re.search(r"^python -m pip install torch==2\.13\.0 ", ci, flags=re.M)
    assert "--index-url" not in ci  # it runs offline on the project's CI machine (the wheel is on disk)
    assert re.search(r"apt-get install .*postgresql slurm-wlm munge", ci)
    assert "useradd --system --no-create-home postgres" in ci
    for line in ("ruff check .", "mypy", "python -m pytest -m 'not gpu'"):
        assert re.search(rf"^{re.escape(line)}$", ci, flags=re.M), line


def test_the_test_workflow_step_runs_ci_run_as_root_with_the_runner_python(tmp_path: Path) -> None:
    """The step's script, run with a `sudo` that only records its arguments: .ci/run is started by
    bash as root with the environment kept and setup-python's PATH first; git is told the checkout
    is safe for root."""
    (step,) = [s for s in _test_job()["steps"] if "run" in s]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sudo_calls"
    fake = bin_dir / "sudo"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{calls}"\n')
    fake.chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    env = {"PATH": path, "GITHUB_WORKSPACE": str(ROOT)}
    rc, _, _ = _run_step(step, tmp_path, env)  # the PATH it is given is checked
    assert rc == 0
    assert calls.read_text().splitlines() == [
        f"git config --system --add safe.directory {ROOT}",
        f"-E env PATH={path} bash .ci/run",
    ]


def test_evaluate_step_imports_lm_evals_output_as_the_candidate_and_the_compare_step_gates_it(
    tmp_path: Path,
) -> None:
    """`lm-eval-artifact`: the downloaded output is imported under the `model` name (nothing
    evaluated), then the compare step gates it against a baseline stored as any run."""
    from mmlu_track.commands.runs import main as runs

    from .conftest import LM_EVAL_DATA

    db = f"sqlite:///{tmp_path / 'store.db'}"
    assert (
        runs(["--db", db, "import", str(LM_EVAL_DATA / "whole_subject"), "--name", "m-base", "--no-mlflow"])
        == 0
    )
    shutil.copytree(LM_EVAL_DATA / "whole_subject_tiny", tmp_path / "lm-eval-output")  # the artifact
    env = {"MODEL": "m-cand", "LM_EVAL_ARTIFACT": "lm-eval-output", "SEQUENTIAL": "false",
           "GITHUB_WORKSPACE": str(tmp_path), "MMLU_TRACK_DB_URL": db, "MLFLOW_URI": ""}  # fmt: skip
    rc, outputs, _ = _run_step(_step("mmlu-gate.yml", "evaluate"), tmp_path, env)
    assert (rc, outputs) == (0, {})
    assert sorted(r.model_name for r in SqlStore(db).runs()) == ["m-base", "m-cand"]
    env |= {"BASELINE": "m-base", "POLICY": "default", "MARGIN": "0.01", "HYDRA_FULL_ERROR": ""}
    rc, outputs, summary = _run_step(_step("mmlu-gate.yml", "compare"), tmp_path, env)
    assert (rc, outputs["exit-code"]) == (1, "1")  # the random model regressed (or too few to tell)
    assert summary.startswith("## MMLU release gate: ")
    rc, outputs, _ = _run_step(_step("mmlu-gate.yml", "evaluate"), tmp_path, env | {"SEQUENTIAL": "true"})
    assert (rc, outputs) == (2, {"exit-code": "2"})
