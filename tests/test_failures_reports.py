"""Reports that must not be lost or corrupted, and values and disks that must fail in one line, each
through the real entry points (in-process)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from sqlalchemy import select
from sqlalchemy.orm import Session

from mmlu_track.store.orm import ComparisonRow
from mmlu_track.store.sql import SqlStore

from .conftest import CONF_DIR, CliResult, synthetic_run

Cli = Callable[..., CliResult]
CORRECT = {"anatomy": [True] * 100 + [False] * 50, "virology": [True] * 90 + [False] * 60}  # 300: a pass


def _compare(cli: Cli, tmp_path: Path, base: str, cand: str, *args: str, **kw: object) -> CliResult:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    return cli(
        "compare", f"baseline={base}", f"candidate={cand}", "tracking.mlflow=false", f"tracking.db_url={db}",
        *args, cwd=tmp_path, **kw,
    )  # fmt: skip


def _reports_in(res: CliResult) -> Path:
    (line,) = [x for x in res.out.splitlines() if x.startswith("reports in ")]
    return Path(line.removeprefix("reports in "))


@contextmanager
def _full_disk(where: Path) -> Iterator[Path]:
    """A 64 KB tmpfs with no room left."""
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                             capture_output=True, check=False)  # fmt: skip
    assert mounted.returncode == 0, mounted.stderr  # root in this project's machines (and CI) may mount
    try:
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={where / 'fill'}", "bs=1k"], capture_output=True, check=False
        )
        yield where
    finally:
        # Lazy: Hydra's job log handler may still hold a file open there after an in-process run.
        subprocess.run(["umount", "-l", str(where)], check=False)


# Finding 8: concurrent or repeated compares never overwrite each other's reports.


def test_compares_sharing_a_folder_each_keep_their_own_report(cli: Cli, tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    a, b, c, d = (synthetic_run(store, f"m{i}", CORRECT) for i in range(4))
    shared = tmp_path / "shared"
    folders = []
    for base, cand in ((a, b), (c, d), (c, d)):
        res = _compare(cli, tmp_path, base, cand, f"hydra.run.dir={shared}")
        assert res.code == 0, res.err
        folders.append(_reports_in(res))
    assert folders[0] == shared
    assert folders[1] == shared / f"compare-{d[:12]}-vs-{c[:12]}"
    assert folders[2].parent == shared
    assert folders[2].name.startswith(folders[1].name + "-")  # the same pair again: its own folder too
    for folder, (base, cand) in zip(folders, ((a, b), (c, d), (c, d)), strict=True):
        doc = json.loads((folder / "report.json").read_text())
        assert (doc["baseline"]["id"], doc["candidate"]["id"]) == (base, cand)
        assert f"candidate run `{cand[:12]}` vs baseline `{base[:12]}`" in (folder / "report.md").read_text()
        assert (folder / "deltas.png").is_file()


def test_the_default_compare_folder_is_unique_to_the_microsecond() -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        compare_cfg = compose("compare", overrides=["baseline=a", "candidate=b"], return_hydra_config=True)
        eval_cfg = compose("eval", return_hydra_config=True)
    pattern = OmegaConf.to_container(compare_cfg.hydra.run, resolve=False)
    evaluation = OmegaConf.to_container(eval_cfg.hydra.run, resolve=False)
    assert isinstance(pattern, dict)
    assert isinstance(evaluation, dict)
    assert pattern["dir"] == "outputs/compare/${now:%Y-%m-%d}/${now:%H-%M-%S-%f}"
    assert pattern["dir"].endswith(evaluation["dir"].removeprefix("outputs"))


# Finding 10: names are text in report.md and the job summary, and as written on the console.


@pytest.mark.parametrize("mode", ["gate", "fewshot_gap"])
def test_names_with_html_and_markdown_are_escaped_in_the_markdown_only(
    cli: Cli, tmp_path: Path, mode: str
) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    html, pipes = "<img src=x onerror=alert(1)>", "a|b**c_[d](e)`f`"
    base = synthetic_run(store, html, CORRECT, k=0 if mode == "fewshot_gap" else 5)
    cand = synthetic_run(store, html if mode == "fewshot_gap" else pipes, CORRECT)
    store.set_mlflow_run(base, "b" * 32, synced=True)
    summary = tmp_path / "summary.md"
    res = _compare(
        cli, tmp_path, base, cand, f"mode={mode}", f"hydra.run.dir={tmp_path / 'r'}",
        "tracking.mlflow_uri='http://mlflow.example/x)<b>y'", env={"GITHUB_STEP_SUMMARY": str(summary)},
    )  # fmt: skip
    assert res.code == 0, res.err
    md = (tmp_path / "r" / "report.md").read_text()
    assert summary.read_text().startswith(md.partition("### All")[0])
    for text in (md, summary.read_text()):
        assert "<img" not in text
        assert "<b>" not in text
        assert "&lt;img src=x onerror=alert(1)&gt;" in text
    title = next(line for line in md.splitlines() if line.startswith("**"))
    assert re.search(r"(?<!\\)[|`\[\]]|(?<!\\)\*(?!\*)", title.removeprefix("**").split("**")[0]) is None
    if mode == "gate":
        assert r"a\|b\*\*c\_\[d\](e)\`f\`" in title
    assert "[baseline run](http://mlflow.example/x%29%3Cb%3Ey/#/runs/" in md
    console = res.out
    assert html in console
    assert mode == "fewshot_gap" or pipes in console


def test_normal_names_render_as_before(cli: Cli, tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    base = synthetic_run(store, "HuggingFaceTB/SmolLM2-135M-Instruct", CORRECT)
    cand = synthetic_run(store, "tiny-random-llama", CORRECT)
    res = _compare(cli, tmp_path, base, cand, f"hydra.run.dir={tmp_path / 'r'}")
    assert res.code == 0, res.err
    md = (tmp_path / "r" / "report.md").read_text()
    assert (
        "**tiny-random-llama vs baseline HuggingFaceTB/SmolLM2-135M-Instruct** — "
        f"candidate run `{cand[:12]}` vs baseline `{base[:12]}`, 300 paired questions, formulation "
        "`original`, scoring `logprob`, k=5, policy `default` (α=0.05, δ=1.0 pts, min effect 5 pts, holm)."
    ) in md
    assert "\\" not in md


# Finding 11: seeds and the test level are range-checked; a full disk is one line.


@pytest.mark.parametrize("seed", ["99999999999999999999", "-1"])
def test_a_seed_out_of_range_is_one_line(cli: Cli, tmp_path: Path, seed: str) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    run = cli("eval", "experiment=smoke", "model=fake", "tracking=sql_only", f"tracking.db_url={db}",
              f"seed={seed}", f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)  # fmt: skip
    assert run.code == 2, run.err
    assert run.err.strip().splitlines() == [
        f"mmlu_track: error: seed={seed} is out of range: allowed 0..2**63-1 ({2**63 - 1})"
    ]
    gate = _compare(cli, tmp_path, "a", "b", f"gate.seed={seed}", f"hydra.run.dir={tmp_path / 'cmp'}")
    assert gate.code == 2
    assert gate.errors == [
        f"mmlu_track: error: gate.seed={seed} is out of range: allowed 0..2**63-1 ({2**63 - 1})"
    ]


def test_a_one_sided_level_above_one_half_is_refused(cli: Cli, tmp_path: Path) -> None:
    res = _compare(cli, tmp_path, "a", "b", "gate.alpha=0.6", f"hydra.run.dir={tmp_path / 'cmp'}")
    assert res.code == 2
    assert res.errors == [
        "mmlu_track: error: gate.alpha=0.6 must be in (0, 0.5]: a one-sided test level, 0.05 = 5 %"
    ]


def test_a_full_disk_under_hydras_config_is_one_line_in_both_entry_points(cli: Cli, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(db)
    base, cand = (synthetic_run(store, f"m{i}", CORRECT) for i in range(2))
    with _full_disk(tmp_path / "full") as full:
        evaluation = cli("eval", "experiment=smoke", "model=fake", "tracking=sql_only",
                         f"tracking.db_url={db}", f"hydra.run.dir={full / 'eval'}", cwd=tmp_path)  # fmt: skip
        comparison = _compare(cli, tmp_path, base, cand, f"hydra.run.dir={full / 'compare'}")
    for which, res in (("eval", evaluation), ("compare", comparison)):
        assert res.code == 2, res.err
        assert res.err.strip().splitlines() == [
            f"mmlu_track: error: cannot write Hydra's config.yaml into {full / which / '.hydra'}: No "
            "space left on device; free space there, or set hydra.run.dir=DIR to a writable folder with room"
        ]


def test_a_full_disk_under_the_reports_is_one_line_and_records_nothing(cli: Cli, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(db)
    base, cand = (synthetic_run(store, f"m{i}", CORRECT) for i in range(2))
    with _full_disk(tmp_path / "full") as full:
        # Hydra's own files off: the reports are the first thing written there.
        off = "hydra.output_subdir=null"
        res = _compare(cli, tmp_path, base, cand, f"hydra.run.dir={full / 'cmp'}", off)
    assert res.code == 2, res.err
    assert res.err.strip().splitlines() == [
        f"mmlu_track: error: cannot write the comparison's reports into {full / 'cmp'}: No space left on "
        "device; free space there, or set hydra.run.dir=DIR to a writable folder with room"
    ]
    with Session(store.engine) as s:
        assert list(s.scalars(select(ComparisonRow))) == []  # no verdict recorded without its reports


def test_a_job_summary_that_cannot_be_written_warns_and_keeps_the_verdict(cli: Cli, tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    base, cand = (synthetic_run(store, f"m{i}", CORRECT) for i in range(2))
    with _full_disk(tmp_path / "full") as full:
        summary = full / "summary.md"
        res = _compare(cli, tmp_path, base, cand, f"hydra.run.dir={tmp_path / 'r'}",
                       env={"GITHUB_STEP_SUMMARY": str(summary)})  # fmt: skip
    assert res.code == 0, res.err
    assert res.err.strip().splitlines() == [
        f"mmlu_track: warning: report not appended to GITHUB_STEP_SUMMARY ({summary}): No space left on "
        "device"
    ]
    assert (tmp_path / "r" / "report.md").is_file()


def test_two_runs_of_one_model_are_titled_by_what_differs(cli: Cli, tmp_path: Path) -> None:
    """`m vs baseline m` said nothing: the title names what differs, and the dtype once (the
    setting and the dtype the model ran in are the same fact)."""
    from mmlu_track.store.sql import SqlStore

    db = f"sqlite:///{tmp_path / 's.db'}"
    store = SqlStore(db)
    flags = {"anatomy": [True, False] * 10}
    base = synthetic_run(store, "m", flags, dtype="float32")
    cand = synthetic_run(store, "m", flags, dtype="bfloat16")
    got = cli("compare", f"baseline={base}", f"candidate={cand}", f"tracking.db_url={db}",
              "tracking.mlflow=false", f"hydra.run.dir={tmp_path / 'r'}", cwd=tmp_path)  # fmt: skip
    assert got.code in (0, 1), got.err
    md = (tmp_path / "r" / "report.md").read_text()
    assert "**m, baseline → candidate: dtype float32 → bfloat16**" in md
    assert "What differs: dtype float32 → bfloat16." in md
    assert "m, baseline → candidate: dtype float32 → bfloat16" in got.out
    # `auto` with what it resolved to, once: no `ran in float32 → bfloat16` repeating it
    auto = synthetic_run(store, "m", flags)
    got = cli("compare", f"baseline={auto}", f"candidate={cand}", f"tracking.db_url={db}",
              "tracking.mlflow=false", f"hydra.run.dir={tmp_path / 'r2'}", cwd=tmp_path)  # fmt: skip
    assert got.code in (0, 1), got.err
    md = (tmp_path / "r2" / "report.md").read_text()
    assert "What differs: dtype auto (float32) → bfloat16." in md
    assert "ran in" not in md
    # A noise check between batch sizes names them, apart from what changes results (it said
    # "nothing recorded" when batch_size was 64 vs 8).
    small = synthetic_run(store, "m", flags, extra=("batch_size=8",))
    got = cli("compare", f"baseline={auto}", f"candidate={small}", f"tracking.db_url={db}",
              "tracking.mlflow=false", f"hydra.run.dir={tmp_path / 'r3'}", cwd=tmp_path)  # fmt: skip
    assert got.code in (0, 1), got.err
    md = (tmp_path / "r3" / "report.md").read_text()
    neutral = "not changing results: batch\\_size 64 → 8."  # Markdown-escaped
    assert f"What differs: nothing that changes results (a noise check); {neutral}" in md
    assert "m, baseline → candidate: batch_size 64 → 8 (not changing results)" in got.out
