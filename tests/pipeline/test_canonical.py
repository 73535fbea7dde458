"""Runs stored by the previous release (schema 0015) after migration 0016 (issue 86): the noise
command's runs marked as such, and runs whose settings were typed in another form (subjects in
another order, stop strings in another order, chat=multiturn at 0 shots) restamped to the canonical
form, so that today's commands reuse them and compare new runs with them.

`tests/data/store_0015.sql` is a store written by the previous release (commit d827935), dumped as
SQL: the tiny model's smoke preset with `subjects=[marketing,anatomy]`, with `k=0 chat=multiturn`,
with `scoring=generate 'scoring.stop=["Question:","\\n\\n"]'` (sorted already: a backslash sorts
after letters), the noise command (`noise.shot_seeds=[7,8]`), then `scoring=generate
'scoring.stop=[Question:,Answer:]'`."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from mmlu_track.pipeline.canonical import restamp
from mmlu_track.pipeline.evaluate import QUIET, run
from mmlu_track.records.run import RunRole
from mmlu_track.store.sql import SqlStore

from ..conftest import ROOT, CliResult, tiny_run_cfg

DUMP = ROOT / "tests" / "data" / "store_0015.sql"
REORDERED, ZERO_SHOT_MULTITURN, STOPS = "36ee663537a6", "b7d6bf225bce", "709251689058"
SORTED_STOPS = "7814cffaffbb"


@pytest.fixture
def legacy(tmp_path: Path) -> str:
    """The previous release's store, as a new SQLite file (not yet migrated)."""
    text = DUMP.read_text(encoding="utf-8")
    assert "INSERT INTO \"alembic_version\" VALUES('0015');" in text  # written at the previous head
    db = tmp_path / "legacy.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(text)
    return f"sqlite:///{db}"


def _rows(url: str) -> dict[str, tuple[str, str, str]]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return {
            r[0][:12]: r[1:] for r in conn.execute("SELECT id, identity, role, data_fingerprint FROM runs")
        }


def test_the_noise_commands_runs_are_marked_and_other_forms_restamped(legacy: str) -> None:
    with sqlite3.connect(legacy.removeprefix("sqlite:///")) as conn:
        old = {r[0][:12]: r[1:] for r in conn.execute("SELECT id, identity, data_fingerprint FROM runs")}
    SqlStore(legacy).close()  # the embedded store is upgraded at start
    new = _rows(legacy)
    noise = {k for k, (_, role, _) in new.items() if role == RunRole.NOISE}
    assert len(noise) == 5  # reference, repeat, batching and two shot seeds: all in mmlu_track_noise
    assert {k for k, (_, role, _) in new.items() if role == RunRole.EVALUATION} == {
        REORDERED,
        ZERO_SHOT_MULTITURN,
        STOPS,
        SORTED_STOPS,
    }
    changed = {k for k in new if new[k][0] != old[k][0]}
    assert changed == {REORDERED, ZERO_SHOT_MULTITURN, STOPS}  # every other identity as it was
    assert new[REORDERED][2] != old[REORDERED][1]  # its questions' fingerprint in the canonical order
    assert new[STOPS][2] == old[STOPS][1]


def test_todays_commands_reuse_the_restamped_runs_whatever_form_they_are_typed_in(
    legacy: str, tmp_path: Path
) -> None:
    ids = {k: full for full in _full_ids(legacy) for k in (full[:12],)}
    asked = [
        (REORDERED, ["subjects=[anatomy,marketing]"]),
        (REORDERED, ["subjects=[marketing,anatomy]"]),
        (ZERO_SHOT_MULTITURN, ["k=0", "chat=single_turn"]),
        (ZERO_SHOT_MULTITURN, ["k=0", "chat=multiturn"]),
        (STOPS, ["scoring=generate", "scoring.stop=[Answer:,Question:]"]),
        (SORTED_STOPS, ["scoring=generate", r'scoring.stop=["\n\n",Question:]']),  # as typed then
    ]
    for i, (expected, overrides) in enumerate(asked):
        out = run(tiny_run_cfg(legacy, *overrides, model="tiny"), tmp_path / str(i), display=QUIET)
        assert out.run_id == ids[expected], overrides


def test_a_new_run_of_the_set_in_another_order_compares_with_the_restamped_one(
    legacy: str, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    again_cfg = tiny_run_cfg(legacy, "subjects=[anatomy,marketing]", "tracking.rerun=true", model="tiny")
    again = run(again_cfg, tmp_path / "r", display=QUIET)
    old = next(i for i in _full_ids(legacy) if i.startswith(REORDERED))
    assert again.run_id != old
    db = f"tracking.db_url={legacy}"
    got = cli("compare", f"baseline={old}", f"candidate={again.run_id}", "tracking=sql_only", db,
              f"hydra.run.dir={tmp_path / 'c'}", cwd=tmp_path)  # fmt: skip
    assert got.code in (0, 1), got.err  # a verdict: the same questions and prompts
    assert "differ" not in got.err


def test_a_run_whose_identity_is_not_hashed_again_from_its_record_is_left_alone(legacy: str) -> None:
    with sqlite3.connect(legacy.removeprefix("sqlite:///")) as conn:
        identity, config, record, protocol = conn.execute(
            "SELECT identity, config_json, record_json, protocol_json FROM runs WHERE id LIKE ?",
            (f"{REORDERED}%",),
        ).fetchone()
    assert restamp(identity, config, record, protocol) is not None
    assert restamp("0" * 64, config, record, protocol) is None  # hashed by other rules: kept as stored
    assert restamp(identity, config, None, protocol) is None  # unfinished: no record of its weights
    assert restamp(identity, "{not json", record, protocol) is None
    moved = json.loads(config)
    moved["data"] = {**moved["data"], "source": "local", "path": "/nowhere"}  # its questions not found
    assert restamp(identity, json.dumps(moved), record, protocol) is None


def _full_ids(url: str) -> list[str]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM runs")]


def test_a_new_single_turn_run_at_zero_shots_compares_with_a_stored_multiturn_one(
    legacy: str, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """Their template hashes differ (each hashes a shot as its style puts it); their prompts are the
    same byte for byte, and the gate compares those question by question."""
    again_cfg = tiny_run_cfg(legacy, "k=0", "chat=single_turn", "tracking.rerun=true", model="tiny")
    again = run(again_cfg, tmp_path / "r", display=QUIET)
    old = next(i for i in _full_ids(legacy) if i.startswith(ZERO_SHOT_MULTITURN))
    got = cli("compare", f"baseline={old}", f"candidate={again.run_id}", "tracking=sql_only",
              f"tracking.db_url={legacy}", f"hydra.run.dir={tmp_path / 'c'}", cwd=tmp_path)  # fmt: skip
    assert got.code in (0, 1), got.err
