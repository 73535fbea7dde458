"""The built wheel, installed outside the checkout, runs from an unrelated folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import ROOT


@pytest.mark.slow  # builds and installs the wheel into a fresh environment
def test_the_wheel_ships_its_configs_and_migrations_and_runs_anywhere(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist)]
    subprocess.run([*build, str(ROOT)], check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("mmlu_track-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"mmlu_track/conf/eval.yaml", "mmlu_track/conf/gate/default.yaml",
            "mmlu_track/migrations/alembic.ini", "mmlu_track/migrations/env.py"} <= names  # fmt: skip
    assert any(n.startswith("mmlu_track/migrations/versions/0003") for n in names)

    # Installed into a folder of its own; dependencies come from this environment. The checkout's
    # editable finder sits after the path finder, so the wheel's copy is the one imported.
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "HYDRA_FULL_ERROR": ""}
    env.pop("MMLU_TRACK_DB_URL", None)

    def run(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cmd, cwd=work, env=env, capture_output=True, text=True, check=False, timeout=300
        )

    where = run(
        sys.executable, "-c", "import mmlu_track.support.resources as r; print(r.CONF_DIR, r.MIGRATIONS_DIR)"
    )
    assert where.stdout.split() == [
        str(site / "mmlu_track" / "conf"),
        str(site / "mmlu_track" / "migrations"),
    ]

    # Two runs from one installed process (a sweep; each job its own run, the second scored again on
    # purpose: the same settings would take the first): one interpreter start less.
    proc = run(str(site / "bin" / "mmlu-track"), "-m", "experiment=smoke", "tracking.rerun=false,true",
               "tracking=sql_only", "hydra.sweep.dir=out")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ids = [json.loads((work / "out" / job / "results.json").read_text())["run_id"] for job in ("0", "1")]
    assert ids[0] != ids[1]
    listed = run(str(site / "bin" / "mmlu-track-runs"), "list")
    assert listed.returncode == 0, listed.stderr
    assert all(i[:12] in listed.stdout for i in ids)
    compared = run(str(site / "bin" / "mmlu-track-compare"), f"baseline={ids[0]}", f"candidate={ids[1]}",
                   "tracking.mlflow=false", "hydra.run.dir=cmp")  # fmt: skip
    assert compared.returncode == 1, compared.stderr  # 6 questions: inconclusive, by design
    assert (work / "cmp" / "report.md").read_text().startswith("## MMLU release gate: INCONCLUSIVE ⚠️")
    assert (work / "mmlu_track.db").is_file()
