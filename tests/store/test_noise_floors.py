"""store/noise_floors.py: noise measurements in the SQL store, newest first, found by the prompt
protocol of the runs a gate compares (one stored before prompt keys: by the whole protocol's key),
linked to their MLflow run once it is logged."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

from mmlu_track.records.stored import NoiseEntry
from mmlu_track.store.noise_floors import NoiseFloors
from mmlu_track.store.sql import SqlStore

from ..conftest import compose_eval, synthetic_run, synthetic_start


def _entry(key: str, day: int, reference: str) -> NoiseEntry:
    return NoiseEntry(
        id=f"{day:02d}" * 16, protocol_key=key, model_name="m", reference_run_id=reference, n=100,
        flip_rate=0.03, margin=0.05, shot_seed_range=None, report_json="{}",
        created_at=datetime(2025, 1, day),
    )  # fmt: skip


def test_the_gate_finds_the_newest_measurement_of_its_prompt_protocol(tmp_path: Path) -> None:
    protocol = synthetic_start(compose_eval(["model=tiny"])).protocol
    other = synthetic_start(compose_eval(["model=tiny", "k=0"])).protocol
    assert protocol.prompt_key() != other.prompt_key()
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        noise = store.noise
        assert isinstance(noise, NoiseFloors)
        assert noise.latest(protocol) is None
        ref = synthetic_run(store, "m", {"anatomy": [True, False]})  # a measurement's reference run
        older, newer = _entry(protocol.prompt_key(), 1, ref), _entry(protocol.prompt_key(), 3, ref)
        before_keys = _entry(protocol.key(), 2, ref)  # stored before prompt keys: its whole protocol's key
        elsewhere = _entry(other.prompt_key(), 9, ref)
        for e in (older, newer, before_keys, elsewhere):
            noise.save(e)
        assert noise.latest(protocol) == newer
        assert noise.latest(other) == elsewhere
        assert [e.id for e in noise.entries()] == [elsewhere.id, newer.id, before_keys.id, older.id]
        assert noise.entries(2, (protocol.key(),)) == [before_keys]
        assert noise.record(_entry("k", 4, ref), None) == (_entry("k", 4, ref), None)  # MLflow off: no run
        noise.set_mlflow(newer.id, "mlflow-run-1")
        assert noise.latest(protocol) == replace(newer, mlflow_run_id="mlflow-run-1")
        assert len(noise.entries()) == 5
    finally:
        store.close()
