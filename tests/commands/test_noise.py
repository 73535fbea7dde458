"""The evaluation's own noise (issue 41): the recommended margin against the gate's own decision
(a worked example at no flips, and by simulation at small and large n), the pairs' counts,
the command's variants, and the command on the tiny model through the real entry point (in-process)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmlu_track.gate.stats import noninferiority
from mmlu_track.stats.noise_margin import Spread, pair_noise, pass_probability, recommend, smallest_margin

from ..conftest import CliResult

Cli = Callable[..., CliResult]
Z = 1.6448536269514722  # z_0.95: the gate's one-sided level α = 0.05


def _gate_passes(b: int, c: int, n: int, margin: float) -> bool:
    return noninferiority(b, c, n, margin, 0.05).shown


def test_at_no_flips_the_margin_is_where_the_gate_starts_passing_an_identical_pair() -> None:
    """Worked example (module docstring): with b = c = 0 the score test needs −z²/(n + z²) > −δ and
    the exact test (1 − δ)ⁿ ≤ α, so δ_min = max(1 − α^(1/n), z²/(n + z²)); the recommended margin
    is where the gate's own decision on an identical pair turns to pass (to 0.05 points, above)."""
    for n in (100, 268, 299):
        found = smallest_margin(n, 0.0, 0.05)
        closed = max(1 - 0.05 ** (1 / n), Z**2 / (n + Z**2))
        assert closed - 1e-9 <= found <= closed + 5e-4
        assert _gate_passes(0, 0, n, found)
        assert not _gate_passes(0, 0, n, found - 5e-4)
    assert pytest.approx(0.00997, abs=1e-5) == 1 - 0.05 ** (1 / 299)  # the README's 299 at δ = 1 point


@pytest.mark.parametrize(("n", "psi"), [(100, 0.06), (1000, 0.06)])
def test_a_noise_only_pair_passes_95_percent_of_the_time_at_the_recommended_margin(
    n: int, psi: float
) -> None:
    """By simulation: pairs drawn with the measured flip rate and no true change, decided by the
    gate's PASS rule (`decision.passes`: non-inferiority shown by the score and the exact test, and
    no McNemar drop — decide()'s, test_compare_stats), pass at the recommended margin at least 95 %
    of the time (up to simulation error), and below it less often."""
    from mmlu_track.stats import decision, paired

    margin = smallest_margin(n, psi, 0.05)
    assert pass_probability(n, psi, margin, 0.05) >= 0.95
    draws = np.random.default_rng(7).multinomial(n, [psi / 2, psi / 2, 1 - psi], size=20_000)
    se = np.sqrt(0.95 * 0.05 / len(draws))
    for delta in (margin, margin - 2e-3):
        rate = float(np.mean(decision.passes(draws[:, 0], draws[:, 1], n, delta, 0.05)))
        exact = pass_probability(n, psi, delta, 0.05)
        assert abs(rate - exact) <= 4 * se, (n, psi, delta, rate, exact)
    assert pass_probability(n, psi, margin - 2e-3, 0.05) < 0.95
    # Non-inferiority alone passes more often: the floor counts the drops a PASS also excludes.
    b, c, w = paired.outcome_distribution(n, psi, 0.0)
    alone = float(np.sum(w * decision.noninferior(b, c, n, margin, 0.05)))
    assert alone >= pass_probability(n, psi, margin, 0.05)
    if n == 1000:  # enough flips for a drop and non-inferiority to be shown together
        assert alone > pass_probability(n, psi, margin, 0.05)


def test_pairs_count_flips_and_the_recommendation_takes_the_worst() -> None:
    ref = [True, True, False, False, True]
    other = [True, False, True, True, True]
    p = pair_noise("repeat", ref, other)
    assert (p.n, p.lost, p.gained, p.flip_rate, p.delta) == (5, 1, 2, 0.6, 0.2)
    assert p.flip_low < 0.6 < p.flip_high
    assert p.delta_low < 0.2 < p.delta_high
    quiet = pair_noise("batching", ref, ref)
    rec = recommend([quiet, p], 0.01, 0.05)
    assert (rec.n, rec.flip_rate) == (5, 0.6)
    assert rec.margin > 0.5  # 5 questions flipping 60 %: a noise-only pair passes only a huge margin
    assert "is below it: at n = 5 two runs differing only by noise would fail it" in rec.paragraph(None)
    spread = Spread((0.40, 0.45, 0.41))
    assert spread.range == pytest.approx(0.05)
    assert spread.sd == pytest.approx(float(np.std([0.40, 0.45, 0.41], ddof=1)))
    with pytest.raises(ValueError, match="2 questions against the reference's 5"):
        pair_noise("x", ref, [True, False])


@pytest.mark.usefixtures("mlflow_store")
def test_the_noise_command_measures_the_tiny_model(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mmlu_track.store.sql

    engines: list[str] = []  # every SQL store the command opens (one: its evaluations record through it)
    real_open = mmlu_track.store.sql.open_engine
    monkeypatch.setattr(
        mmlu_track.store.sql, "open_engine", lambda url: engines.append(url) or real_open(url)
    )
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"
    args = ["experiment=smoke", "device=cpu", "tracking.mlflow=false", db, f"hydra.run.dir={tmp_path / 'n'}"]
    got = cli("noise", *args, "noise.shot_seeds=[1,2]", cwd=tmp_path)
    assert got.code == 0, got.err
    assert len(engines) == 1
    doc = json.loads((tmp_path / "n" / "noise.json").read_text())
    names = [p["name"] for p in doc["pairs"]]
    assert names == ["repeat", "batching (1, None)", "shot seed 1", "shot seed 2"]
    assert doc["gated"] == ["repeat", "batching (1, None)"]
    repeat = doc["pairs"][0]
    assert (repeat["lost"], repeat["gained"], repeat["n"]) == (0, 0, 4)  # in-process scoring is deterministic
    assert len(doc["shot_seed_accuracies"]) == 2
    spread = doc["shot_seed_spread"]
    assert set(spread["subjects"]) == {"abstract_algebra", "anatomy"}
    assert len(spread["categories"]["STEM"]["accuracies"]) == 2
    assert "shot seeds, widest subject:" in got.out
    assert "This evaluation's own noise" in got.out
    assert doc["recommendation"]["paragraph"] in got.out
    # Run again: the reference and the shot seeds are taken from the store; repeat and batching run.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logged = [f"tracking.mlflow_uri={uri}", "tracking.mlflow=true", f"hydra.run.dir={tmp_path / 'm'}"]
    again = cli("noise", *args[:-1], *logged, "noise.shot_seeds=[1,2]", cwd=tmp_path)
    assert again.code == 0, again.err
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("mmlu_track_noise").experiment_id
    runs = client.search_runs([experiment])
    (noise_run,) = [r for r in runs if r.data.tags.get("mmlu_track.kind") == "noise"]
    # Its evaluations sit in its own experiment, never among the team's, named by their role (the
    # repeat has the reference's very settings, and had its very name); the run's page is printed.
    roles = sorted(r.info.run_name.split(": ")[0] for r in runs if r is not noise_run)
    assert roles == ["noise batching (1, None)", "noise repeat"]
    assert client.get_experiment_by_name("mmlu_track") is None
    page = f"MLflow: http://127.0.0.1:5000/#/experiments/{experiment}/runs/{noise_run.info.run_id}?"
    assert page in again.out
    assert noise_run.data.metrics["recommended_margin_pts"] > 0
    assert noise_run.data.tags["mlflow.note.content"].startswith("This evaluation's own noise")
    assert noise_run.data.tags["mmlu_track.kind"] == "noise"
    doc2 = json.loads((tmp_path / "m" / "noise.json").read_text())
    assert doc2["runs"]["shot seed 1"] == doc["runs"]["shot seed 1"]
    assert doc2["runs"]["repeat"] != doc["runs"]["repeat"]
    # Roles by what each run was scored at, never by identity alone: the second reference is a run at
    # the configured batching (before: the first measurement's batch-1 run), the batching pair
    # compares two batchings, and each pair's runs and batching are named.
    from mmlu_track.store.sql import SqlStore

    store = SqlStore(db.split("=", 1)[1])
    batch = {role: store.get(run).config.batch_size for role, run in doc2["runs"].items()}  # type: ignore[union-attr]
    store.close()
    assert batch["batching (1, None)"] == 1 != batch["reference"] == batch["repeat"]
    assert len({doc2["runs"][r] for r in ("reference", "repeat", "batching (1, None)")}) == 3
    assert doc2["batching"]["batching (1, None)"] == "batch_size 1, batch_tokens none"
    assert f"{doc2['runs']['batching (1, None)'][:12]} (batch_size 1, batch_tokens none)" in again.out
    assert doc2["subjects"] == ["abstract_algebra", "anatomy"]
    # Stored: `runs noise` lists it, and a gate over this protocol states it and warns.
    listed = cli("runs", "--db", db.split("=", 1)[1], "noise", cwd=tmp_path)
    assert listed.code == 0
    assert listed.out.count("tiny-random-llama") == 2
    runs_db = ["runs", "--db", db.split("=", 1)[1]]
    assert "2 noise measurements (reference runs" in cli(*runs_db, "list", cwd=tmp_path).out
    shown = cli(*runs_db, "show", doc["runs"]["reference"], cwd=tmp_path).out
    assert "noise floor of this protocol: measurement" in shown
    base, cand = doc["runs"]["reference"], doc["runs"]["repeat"]
    cmp_args = [f"baseline={base}", f"candidate={cand}", db, "tracking.mlflow=false", "gate.warn_only=true"]
    gated = cli("compare", *cmp_args, f"hydra.run.dir={tmp_path / 'cmp'}", cwd=tmp_path)
    assert gated.code == 0, gated.err
    assert "this evaluation's own noise (measurement" in gated.out
    assert "warning: gate.margin = 1.00 pts is below this evaluation's noise floor" in gated.out
    auto = cli("compare", *cmp_args, "gate.margin=auto", f"hydra.run.dir={tmp_path / 'auto'}", cwd=tmp_path)
    assert auto.code == 0, auto.err
    floor = doc["recommendation"]["margin"]
    assert f"gate.margin=auto: δ = {100 * floor:.2f} pts, the floor of measurement" in auto.out
    report = json.loads(next((tmp_path / "auto").rglob("report.json")).read_text())
    assert report["policy"]["margin"] == pytest.approx(floor)
    # The measurement serves a comparison of other questions asked the same way, at its own n: a
    # floor measured on a few questions sets δ for more, from the flip rate's upper limit.
    wider = [a for a in args if not a.startswith("hydra.run.dir")] + ["limit=5"]
    made = [cli("eval", *wider, f"hydra.run.dir={tmp_path / f'w{i}'}", "tracking.resume=false", cwd=tmp_path)
            for i in range(2)]  # fmt: skip
    assert all(m.code == 0 for m in made), made[0].err
    store = SqlStore(db.split("=", 1)[1])
    measured = doc["recommendation"]["n"]
    six = [r.id for r in store.runs() if r.protocol.n_questions > measured]
    entry = store.noise.latest(store.get(six[0]).protocol)  # type: ignore[union-attr]
    n = store.get(six[0]).protocol.n_questions  # type: ignore[union-attr]
    store.close()
    assert len(six) == 2
    assert entry is not None
    assert entry.n == measured
    at_six = cli("compare", f"baseline={six[1]}", f"candidate={six[0]}", *cmp_args[2:], "gate.margin=auto",
                 f"hydra.run.dir={tmp_path / 'six'}", cwd=tmp_path)  # fmt: skip
    assert at_six.code == 0, at_six.err
    expected = entry.margin_at(n, 0.05)
    assert expected < entry.margin  # more questions: a smaller floor from the same flip rate
    assert (
        f"gate.margin=auto: δ = {100 * expected:.2f} pts, the floor of measurement {entry.id[:12]} at n = {n}"
        in at_six.out
    )
    assert "of answers changed between these runs; noise alone flips at most" in at_six.out
    from mmlu_track.gate.policy import auto_margin
    from mmlu_track.gate.stats import ComparisonError
    from mmlu_track.settings.config import GateConfig

    with pytest.raises(ComparisonError, match=r"gate\.margin=auto needs a noise measurement"):
        auto_margin(GateConfig("default", margin="auto"), None, "m", 114)
    bad = cli("noise", *args[:-1], "noise.shot_seeds=1", cwd=tmp_path)
    assert bad.code == 2
    (line,) = bad.errors
    assert "noise.shot_seeds must be a list" in line


def test_evaluations_sharded_beforehand_are_reused(cli: Cli, tmp_path: Path) -> None:
    """Shards (here in turn; through Hydra's launchers the same) make the run the noise command
    would make: it takes them as they are, and scores only the repeat and the batching."""
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"
    common = ["experiment=smoke", "model=fake", "device=cpu", "tracking.mlflow=false", db]
    for shard in (0, 1):
        got = cli(
            "eval",
            *common,
            "limit=2",
            "shards=2",
            f"shard={shard}",
            f"hydra.run.dir={tmp_path / str(shard)}",
            cwd=tmp_path,
        )
        assert got.code == 0, got.err
    (sharded,) = (json.loads(p.read_text())["run_id"] for p in tmp_path.rglob("results.json"))
    got = cli("noise", *common, "noise.shot_seeds=[]", f"hydra.run.dir={tmp_path / 'n'}", cwd=tmp_path)
    assert got.code == 0, got.err
    doc = json.loads((tmp_path / "n" / "noise.json").read_text())
    assert doc["runs"]["reference"] == sharded
    assert [p["name"] for p in doc["pairs"]] == ["repeat", "batching (1, None)"]
    assert doc["shot_seed_accuracies"] is None


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("noise.batch_size=0", "noise.batch_size=0 must be >= 1"),
        ("noise.batch_tokens=-5", "noise.batch_tokens=-5 must be >= 1"),
        ("noise.shot_seeds=[-1,2]", "noise.shot_seeds=-1 is out of range"),
        ("noise.shot_seeds=[1,1]", "noise.shot_seeds=[1, 1] names a seed twice"),
        ("noise.shot_seeds=[4]", "noise.shot_seeds=[4] is one seed: a spread needs two or more"),
        (f"noise.shot_seeds=[{','.join(map(str, range(300)))}]", "noise.shot_seeds names 300 seeds: each is"),
    ],
)
def test_the_noise_commands_own_settings_are_checked_before_any_evaluation(
    cli: Cli, tmp_path: Path, setting: str, message: str
) -> None:
    """They were not: noise.batch_size=0 failed as a bug after two evaluations had run."""
    got = cli("noise", "experiment=smoke", "device=cpu", setting, cwd=tmp_path)
    assert got.code == 2
    (line,) = got.errors
    assert line.startswith(f"mmlu_track: error: {message}")
    assert not list(tmp_path.rglob("*.db"))  # nothing evaluated, nothing recorded


def test_the_gate_states_the_floor_at_its_own_n_and_what_the_measurement_did_not_cover() -> None:
    """A measurement on 114 questions serves a 570-question comparison of the same prompt protocol:
    the floor at 570 from the flip rate's upper limit, the comparison's own flips beside the noise's,
    a warning for the subjects it did not measure, and a bound that never contradicts the verdict."""
    from datetime import UTC, datetime

    from mmlu_track.gate.policy import auto_margin, noise_notes
    from mmlu_track.gate.stats import compare
    from mmlu_track.records.stored import NoiseEntry
    from mmlu_track.settings.config import GateConfig
    from mmlu_track.stats.noise_margin import flip_upper

    entry = NoiseEntry(
        id="e" * 32, protocol_key="p", model_name="m", reference_run_id="r" * 32, n=114, flip_rate=0.0,
        margin=smallest_margin(114, flip_upper(0, 114), 0.05), shot_seed_range=None,
        report_json=json.dumps({"subjects": ["anatomy"]}), created_at=datetime.now(UTC),
    )  # fmt: skip
    assert entry.flip_upper == pytest.approx(0.0232, abs=1e-4)  # one-sided 95 % Wilson at 0 of 114
    assert entry.margin_at(114, 0.05) == entry.margin
    at_570 = auto_margin(GateConfig("default", margin="auto"), entry, "m", 570)
    assert at_570.delta == pytest.approx(smallest_margin(570, entry.flip_upper, 0.05))
    assert at_570.delta < entry.margin
    x = np.tile([1.0, 0.0], 285)
    y = x.copy()
    y[:4] = 1.0 - y[:4]  # 2 lost, 2 gained
    half = len(x) // 2
    comp = compare({"anatomy": (x[:half], y[:half]), "virology": (x[half:], y[half:])}, at_570)
    notes = noise_notes(entry, comp, at_570, "pass")
    floor = f"n = 570 a noise-only pair passes 95 % of the time from δ = {100 * at_570.delta:.2f}"
    assert floor in notes[0]
    assert notes[1] == "0.7 % of answers changed between these runs; noise alone flips at most 2.3 %"
    assert any("did not cover 1 of the 2 subjects compared (e.g. virology)" in n for n in notes)
    # Below the floor, the warning says what it means for the verdict beside it (issue 55 item 6).
    strict = GateConfig("default", margin=0.001)
    below = {status: noise_notes(entry, comp, strict, status)[-1] for status in ("pass", "inconclusive")}
    assert below["pass"].startswith("warning: gate.margin = 0.10 pts is below this evaluation's noise floor")
    stands = "; this PASS stands (a margin below the floor makes noise alone likelier to fail, never to pass)"
    assert below["pass"].endswith(stands)
    noise_alone = "; this INCONCLUSIVE may be noise alone: gate.margin=auto gates at the floor"
    assert below["inconclusive"].endswith(noise_alone)


def test_a_bound_above_minus_delta_never_stands_beside_not_shown() -> None:
    """Over a grid of outcomes and margins: non-inferiority is shown exactly when the printed bound
    lies above −δ (or on it, where the exact critical value is above z)."""
    rng = np.random.default_rng(52)
    for n in (20, 114, 298, 299, 570):
        for _ in range(10):
            flips = int(rng.integers(0, max(2, n // 8)))
            lost = int(rng.integers(0, flips + 1))
            for margin in (0.01, 0.02, 0.05):
                ni = noninferiority(lost, flips - lost, n, margin, 0.05)
                assert ni.shown == (ni.lower_bound > -margin or (ni.shown and ni.lower_bound == -margin))


def test_the_variants_differ_from_the_reference_only_in_what_must_not_matter() -> None:
    """`commands/noise.py`'s plan: the reference and its repeat, a batching variant only where the
    batching differs, one run per shot seed (other prompts: never gated), a dtype only when named."""
    from dataclasses import replace

    from mmlu_track.commands.noise import variants
    from mmlu_track.settings.config import NoiseConfig

    from ..conftest import compose_eval

    cfg = compose_eval(["model=tiny", "batch_size=8"])
    planned = variants(cfg, NoiseConfig(shot_seeds=(4, 5), batch_size=1, dtype="bfloat16"))
    assert [(v.name, v.reuse, v.gated) for v in planned] == [
        ("reference", True, True),
        ("repeat", False, True),
        ("batching (1, None)", False, True),
        ("shot seed 4", True, False),
        ("shot seed 5", True, False),
        ("dtype bfloat16", True, True),
    ]
    ref, _, batching, seed4, _, dtype = planned
    assert ref.cfg is cfg
    assert batching.cfg == replace(cfg, batch_size=1, batch_tokens=None)
    assert (seed4.cfg.shot_selection, seed4.cfg.shot_seed, seed4.cfg.seed) == ("random", 4, cfg.seed)
    assert dtype.cfg == replace(cfg, dtype="bfloat16")
    assert batching.batching == "batch_size 1, batch_tokens none"
    origin = seed4.origin(resolved=None)
    assert (origin.reuse, origin.own_batching, origin.label) == (True, False, "noise shot seed 4")
    same = variants(cfg, NoiseConfig((), cfg.batch_size, cfg.batch_tokens, dtype=cfg.dtype))
    assert [v.name for v in same] == ["reference", "repeat"]


def test_the_readme_path_runs_as_written_after_the_noise_command(cli: Cli, tmp_path: Path) -> None:
    """Evaluate, measure the noise, evaluate the candidate, compare by model name (issue 86): the
    noise command's runs (a repeat, another batching, other shots) are measurements of the protocol,
    never the baseline a model name resolves to, unless asked for."""
    db = f"sqlite:///{tmp_path / 'store.db'}"
    common = ["experiment=smoke", "model=fake", "device=cpu", "tracking=sql_only", f"tracking.db_url={db}",
              "limit=2"]  # fmt: skip

    def run_id(got: CliResult) -> str:
        assert got.code == 0, got.err
        return got.out.rsplit("; run ", 1)[1].split()[0]

    first = run_id(cli("eval", *common, f"hydra.run.dir={tmp_path / 'a'}", cwd=tmp_path))
    noise = cli("noise", *common, "noise.shot_seeds=[1,2]", f"hydra.run.dir={tmp_path / 'n'}", cwd=tmp_path)
    assert noise.code == 0, noise.err
    made = json.loads((tmp_path / "n" / "noise.json").read_text())["runs"]
    assert made["reference"] == first  # the evaluation it was given, taken as it is
    second = run_id(cli("eval", *common, "dtype=bfloat16", f"hydra.run.dir={tmp_path / 'b'}", cwd=tmp_path))

    def compare(*extra: str) -> dict[str, Any]:
        folder = tmp_path / f"c{len(list(tmp_path.glob('c*')))}"
        names = ["baseline=fake-model", "candidate=fake-model"]
        got = cli("compare", *names, "tracking=sql_only", f"tracking.db_url={db}", *extra,
                  f"hydra.run.dir={folder}", cwd=tmp_path)  # fmt: skip
        assert got.code in (0, 1), got.err  # a verdict
        doc: dict[str, Any] = json.loads((folder / "report.json").read_text())
        return doc

    report = compare()
    assert (report["baseline"]["id"], report["candidate"]["id"]) == (first, second)
    noise_runs = {made[name] for name in made if name != "reference"}
    assert compare("noise_runs=true")["baseline"]["id"] in noise_runs  # asked for: the newest comparable
    listed = cli("runs", "--db", db, "list", cwd=tmp_path).out.splitlines()
    marked = {line[:12] for line in listed[1:] if line.split()[2:3] == ["noise"]}
    assert marked == {r[:12] for r in noise_runs}
    assert "role noise: a run the noise command made" in "\n".join(listed)
    shown = cli("runs", "--db", db, "show", made["repeat"], cwd=tmp_path).out.splitlines()[0]
    assert shown.endswith("role noise (made by the noise command: not a version of the model)")
    hidden = cli("runs", "--db", db, "list", "--no-noise", cwd=tmp_path).out.splitlines()
    assert {line[:12] for line in hidden[1:] if line[:12] in {first[:12], second[:12]}} == {
        first[:12],
        second[:12],
    }
    assert not {line[:12] for line in hidden[1:]} & {r[:12] for r in noise_runs}
