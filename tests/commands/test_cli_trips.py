"""Where a user tripped on the README's own path (issue 86), through the real entry points in-process:
a set typed in another order, a chain of thought on MMLU, the hub out of reach, a repeated question,
what a run leaves beside its stores."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ..conftest import SHARED_DIR, CliResult, require_shared

Cli = Callable[..., CliResult]
SMOKE = ["experiment=smoke", "model=fake", "device=cpu", "tracking=sql_only"]
PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def _db(tmp_path: Path) -> str:
    return f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"


def test_the_same_subjects_in_another_order_are_the_same_run(cli: Cli, tmp_path: Path) -> None:
    first = cli("eval", *SMOKE, _db(tmp_path), "subjects=[anatomy,marketing]", cwd=tmp_path)
    assert first.code == 0, first.err
    run_id = first.out.rsplit("run ", 1)[1].split()[0]
    again = cli("eval", *SMOKE, _db(tmp_path), "subjects=[marketing,anatomy]", cwd=tmp_path)
    assert again.code == 0, again.err
    assert f"already evaluated: run {run_id}" in again.out  # nothing scored again
    listed = cli("runs", "--db", f"sqlite:///{tmp_path / 'store.db'}", "list", cwd=tmp_path)
    assert len(listed.out.splitlines()) == 2  # the header and one run


def test_a_chain_of_thought_on_mmlu_is_refused_before_any_model_loads(cli: Cli, tmp_path: Path) -> None:
    """`scoring=cot` has MMLU-Pro's protocol only; on MMLU it ran for minutes and stored answers that
    mean nothing. Keyed on what the scoring does: the extraction cascade, however it was set."""
    for how in (["scoring=cot"], ["scoring=generate", "scoring.extract=cascade"]):
        started = time.monotonic()
        got = cli("eval", *SMOKE, _db(tmp_path), *how, cwd=tmp_path)
        assert got.code == 2, got.err
        assert got.errors == [got.err.strip()]  # one line
        assert "benchmark=mmlu_pro formulation=cot_official" in got.err
        assert time.monotonic() - started < 10
    assert list(tmp_path.iterdir()) == []  # no store, no outputs folder


def test_the_hub_out_of_reach_is_one_line_in_seconds_naming_the_offline_form(
    cli: Cli, tmp_path: Path
) -> None:
    """No retry loop when the hub's host does not even resolve (`.invalid` never does, RFC 6761)."""
    env = {"HF_ENDPOINT": "https://hub.invalid", "HF_HUB_OFFLINE": "", "HF_DATASETS_OFFLINE": ""}
    env |= dict.fromkeys(PROXIES, "")  # no proxy: this machine resolves the host itself
    cases = [
        (["benchmark=mmlu_pro", "data=mmlu_pro", "subjects=all"], "data=mmlu_pro_local data.path=FOLDER"),
        (["data=mmlu_hub"], "data=mmlu"),
    ]
    for args, offline in cases:
        started = time.monotonic()
        got = cli("eval", *SMOKE, _db(tmp_path), *args, cwd=tmp_path, env=env)
        assert got.code == 2, got.err
        assert got.errors == [got.err.strip()]  # one line
        assert "hub.invalid does not resolve" in got.err
        assert offline in got.err
        assert time.monotonic() - started < 10
    assert list(tmp_path.iterdir()) == []


def test_a_repeated_question_id_is_refused_naming_both_rows_and_nothing_is_recorded(
    cli: Cli, tmp_path: Path
) -> None:
    real = SHARED_DIR / "data" / "mmlu-pro"
    require_shared(real / "test.jsonl")
    with (real / "test.jsonl").open(encoding="utf-8") as f:
        test = [{**json.loads(next(f)), "question_id": 1000 + i} for i in range(10)]
    test.append(test[3])  # a repeated row
    folder = tmp_path / "pro"
    folder.mkdir()
    (folder / "validation.jsonl").write_bytes((real / "validation.jsonl").read_bytes())
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    pro = ["benchmark=mmlu_pro", "data=mmlu_pro_local", f"data.path={folder}", "subjects=all", "k=0"]
    got = cli("eval", *SMOKE, _db(tmp_path), *pro, cwd=tmp_path)
    assert got.code == 2, got.err
    assert got.errors == [
        f"mmlu_track: error: question_id 1003 is given twice ({folder / 'test.jsonl'}: test row 4, and test "
        "row 11): each question once, under its own id"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pro"]  # no store made, no outputs folder


def test_a_run_leaves_no_lock_file_beside_its_mlflow_store(cli: Cli, tmp_path: Path) -> None:
    mlflow = f"tracking.mlflow_uri=sqlite:///{tmp_path / 'mlflow.db'}"
    got = cli("eval", "experiment=smoke", "device=cpu", _db(tmp_path), mlflow, cwd=tmp_path)
    assert got.code == 0, got.err
    assert (tmp_path / "mlflow.db").is_file()
    assert not list(tmp_path.glob("*.lock"))


def test_behind_a_proxy_the_hosts_name_is_left_to_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy resolves the hub's host where this machine often cannot: no refusal by name then."""
    from mmlu_track.eval.data import DataError, hub_unreachable

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "NO_PROXY", "no_proxy", *PROXIES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    with pytest.raises(DataError, match=r"hub\.invalid does not resolve"):
        hub_unreachable("x", "data=mmlu")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    hub_unreachable("x", "data=mmlu")  # the library goes through the proxy and says what it finds


def test_two_mmlu_pro_runs_compare_with_the_rows_a_single_runs_report_has(cli: Cli, tmp_path: Path) -> None:
    """A single MMLU-Pro run's report shows its questions taken from MMLU beside the new ones; the
    compare of two had no such rows (issue 86). On the fake model: the model is not the point."""
    real = SHARED_DIR / "data" / "mmlu-pro"
    require_shared(real / "test.jsonl")
    folder = tmp_path / "pro"
    folder.mkdir()
    with (real / "test.jsonl").open(encoding="utf-8") as f:
        (folder / "test.jsonl").write_text("".join(next(f) for _ in range(400)))
    (folder / "validation.jsonl").write_bytes((real / "validation.jsonl").read_bytes())
    db = _db(tmp_path)
    pro = ["model=fake", "tracking=sql_only", db, "benchmark=mmlu_pro", "data=mmlu_pro_local",
           f"data.path={folder}", "subjects=[business]", "k=0"]  # fmt: skip
    for dtype in ("float32", "bfloat16"):
        got = cli("eval", *pro, f"dtype={dtype}", cwd=tmp_path)
        assert got.code == 0, got.err
        assert "from MMLU" in got.out  # the single run's report
    compared = cli("compare", "baseline=fake-model", "candidate=fake-model", "tracking=sql_only", db,
                   f"hydra.run.dir={tmp_path / 'c'}", cwd=tmp_path)  # fmt: skip
    assert compared.code in (0, 1), compared.err
    lines = [line.strip() for line in compared.out.splitlines()]
    assert any(line.startswith("from MMLU ") for line in lines), compared.out
    assert any(line.startswith("new in MMLU-Pro ") for line in lines)
