"""The evaluation's own noise, for one model and one protocol (`python -m mmlu_track.noise`).

    python -m mmlu_track.noise [evaluation settings ...] [noise.shot_seeds=[1,2,3]] [noise.dtype=bfloat16]

It runs the evaluation it is given (the **reference**; a finished run of the same identity scored at
the same batching is taken as it is) and the evaluations that differ from it only in what must not matter:

- **repeat**: the same settings again (determinism; a served model's own nondeterminism);
- **batching**: `noise.batch_size` / `noise.batch_tokens` instead of the evaluation's;
- **shot seed s**: `shot_selection=random shot_seed=s` for each of `noise.shot_seeds` (the same
  questions: the sample keeps `seed`);
- **dtype** (only when `noise.dtype` is named);
- **option order**: a circular reference's rotations 1-3 against rotation 0 (no further run).

Each is measured against the reference question by question (`stats.noise_margin`), and the margin the
gate can use at this noise is recommended from the pairs the gate itself would compare (repeat,
batching, dtype: the same prompts); shot seeds and option order show what the protocol's own
choices move, and runs with other shots or orders are never gated against each other.
Exit 0, or 2 with one line. Hydra-free: `cli.noise_main` composes `conf/noise.yaml` and calls
`measure`.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mmlu_track.gate.stats import pts
from mmlu_track.pipeline.evaluate import QUIET, run
from mmlu_track.pipeline.prepare import Origin
from mmlu_track.pipeline.resolve import resolve
from mmlu_track.pipeline.session import RunOutput
from mmlu_track.records.results import QuestionResult
from mmlu_track.records.run import RunRecord, RunRole
from mmlu_track.records.stored import NoiseEntry
from mmlu_track.settings.config import EvalConfig, GateConfig, NoiseConfig
from mmlu_track.settings.resolved import Resolved
from mmlu_track.stats.noise_margin import PairNoise, Recommendation, Spread, pair_noise, recommend
from mmlu_track.store.mlflow import NoiseRun, Target
from mmlu_track.store.recorder import StoreOnDemand

NOISE_FILE = "noise.json"
Echo = Callable[[str], None]


@dataclass(frozen=True)
class Variant:
    """One evaluation of the measurement: its name, its settings, whether a finished run of its
    identity is taken as it is (`reuse`), and whether the gate would compare it with the reference
    (`gated`: the same prompts)."""

    name: str
    cfg: EvalConfig
    reuse: bool  # a finished run of its identity is taken as it is (not: repeat, batching)
    gated: bool  # the gate would compare it with the reference (the same prompts)

    def origin(self, resolved: Resolved) -> Origin:
        """How the variant's evaluation starts: with the command's own choices (`resolved`)."""
        # The gated runs share the reference's identity: each takes or resumes only a run scored at
        # its own batching, so that no run stands in for another (a batch-1 run is never the repeat).
        label = f"noise {self.name}"
        return Origin(
            reuse=self.reuse, own_batching=self.gated, label=label, resolved=resolved, role=RunRole.NOISE
        )

    @property
    def batching(self) -> str:
        """The batching it is scored at, as the reports print it: `batch_size 8, batch_tokens none`."""
        return f"batch_size {self.cfg.batch_size}, batch_tokens {self.cfg.batch_tokens or 'none'}"


def variants(cfg: EvalConfig, noise: NoiseConfig) -> list[Variant]:
    """The reference, then what differs from it only in what must not matter (module docstring)."""
    out = [Variant("reference", cfg, True, True), Variant("repeat", cfg, False, True)]
    batching = replace(cfg, batch_size=noise.batch_size, batch_tokens=noise.batch_tokens)
    if (batching.batch_size, batching.batch_tokens) != (cfg.batch_size, cfg.batch_tokens):
        out.append(Variant(f"batching ({noise.batch_size}, {noise.batch_tokens})", batching, False, True))
    for seed in noise.shot_seeds:
        shots = replace(cfg, shot_selection="random", shot_seed=seed)
        out.append(Variant(f"shot seed {seed}", shots, True, False))
    if noise.dtype is not None and noise.dtype != cfg.dtype:
        out.append(Variant(f"dtype {noise.dtype}", replace(cfg, dtype=noise.dtype), True, True))
    return out


@dataclass(frozen=True)
class NoiseReport:
    """A finished noise measurement: the reference and each variant's run and batching, the pairs
    measured against the reference, the shot seeds' spread (None without shot seeds) and the margin
    recommended from the gated pairs. Written as noise.json."""

    reference_run: str
    runs: dict[str, str]  # variant name -> its run id
    batching: dict[str, str]  # variant name -> the batching it was scored at
    subjects: tuple[str, ...]  # the subjects of the questions measured
    pairs: tuple[PairNoise, ...]
    gated: tuple[str, ...]  # the names of the pairs the recommendation rests on
    spread: Spread | None  # micro accuracy across the shot seeds
    recommendation: Recommendation
    # The same per category and per subject: {"categories": {name: Spread}, "subjects": {...}}.
    spreads: dict[str, dict[str, Spread]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The report as noise.json (and the store's `report_json`) holds it: each pair with its flip rate
        and Δ, the shot seeds' accuracies and spreads, the recommendation with its paragraph."""
        rec = self.recommendation
        return {
            "reference_run": self.reference_run,
            "runs": self.runs,
            "batching": self.batching,
            "subjects": list(self.subjects),
            "pairs": [{**asdict(p), "flip_rate": p.flip_rate, "delta": p.delta} for p in self.pairs],
            "gated": list(self.gated),
            "shot_seed_accuracies": list(self.spread.accuracies) if self.spread else None,
            "shot_seed_spread": {
                group: {
                    name: {"accuracies": list(s.accuracies), "sd": s.sd, "range": s.range}
                    for name, s in table.items()
                }
                for group, table in self.spreads.items()
            },
            "recommendation": {**asdict(rec), "paragraph": rec.paragraph(self.spread)},
        }


def _outcomes(results: Sequence[QuestionResult], rotation: int | None = None) -> dict[tuple[str, int], bool]:
    if rotation is None:
        return {(r.subject, r.index): r.correct for r in results}
    return {(r.subject, r.index): r.chosen[rotation] == r.gold for r in results}


def _pair(name: str, ref: dict[tuple[str, int], bool], other: dict[tuple[str, int], bool]) -> PairNoise:
    if ref.keys() != other.keys():
        raise ValueError(f"{name} scored other questions than the reference (a bug: the sample keeps `seed`)")
    keys = sorted(ref)
    return pair_noise(name, [ref[k] for k in keys], [other[k] for k in keys])


def measure(cfg: EvalConfig, noise: NoiseConfig, output_dir: Path, echo: Echo = print) -> NoiseReport:
    """Run (or reuse) every variant, pair each with the reference, recommend; write noise.json;
    record the measurement. One SQL store for all of it: every evaluation records through it."""
    with closing(StoreOnDemand(cfg.tracking)) as store:  # a new SQLite file: made by the first run
        return _measure(store, cfg, noise, output_dir, echo)


def _evaluated(v: Variant, store: StoreOnDemand, noise: NoiseConfig, resolved: Resolved, output_dir: Path,
               echo: Echo) -> RunOutput:  # fmt: skip
    """One variant's evaluation, in the measurement's own MLflow experiment: its runs never sit
    among the team's evaluations."""
    folder = output_dir / v.name.replace(" ", "_").replace("(", "").replace(")", "").replace(",", "")
    own = replace(v.cfg, tracking=replace(v.cfg.tracking, experiment=noise.experiment))
    out = run(own, folder, display=QUIET, origin=v.origin(resolved), store=store)
    if out.record is None or out.run_id is None:
        raise RuntimeError(f"the {v.name} evaluation did not finish (a bug: it runs unsharded)")
    accuracy = 100 * out.record.scores.micro.acc
    echo(f"{v.name}: run {out.run_id[:12]} ({v.batching}), accuracy {accuracy:.2f} %")
    return out


def _measure(
    store: StoreOnDemand, cfg: EvalConfig, noise: NoiseConfig, output_dir: Path, echo: Echo
) -> NoiseReport:
    planned = variants(cfg, noise)
    resolved = resolve(cfg)  # once for every variant: they differ in nothing it chooses from
    outs = {v.name: _evaluated(v, store, noise, resolved, output_dir, echo) for v in planned}
    gated_names = [v.name for v in planned if v.gated and v.name != "reference"]
    ref = _outcomes(outs["reference"].results)
    pairs = [_pair(name, ref, _outcomes(out.results)) for name, out in outs.items() if name != "reference"]
    if cfg.scoring.choice_order == "circular":
        pairs += [_pair(f"option order {r}", ref, _outcomes(outs["reference"].results, r)) for r in (1, 2, 3)]
    scored = [out.record.scores for name, out in outs.items() if name.startswith("shot seed") and out.record]
    spread = Spread(tuple(s.micro.acc for s in scored)) if scored else None
    spreads = (
        {
            group: {
                key: Spread(tuple(getattr(s, group)[key].acc for s in scored))
                for key in getattr(scored[0], group)
            }
            for group in ("categories", "subjects")
        }
        if scored
        else {}
    )
    gate = (cfg.gate or GateConfig("default")).numeric()  # what n the chosen δ needs at this noise
    rec = recommend([p for p in pairs if p.name in gated_names], gate.delta, gate.alpha)
    report = NoiseReport(
        reference_run=str(outs["reference"].run_id),
        runs={name: str(out.run_id) for name, out in outs.items()},
        batching={v.name: v.batching for v in planned},
        subjects=tuple(sorted({r.subject for r in outs["reference"].results})),
        pairs=tuple(pairs),
        gated=tuple(gated_names),
        spread=spread,
        recommendation=rec,
        spreads=spreads,
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / NOISE_FILE).write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
    echo(table(report))
    _say_spreads(spreads, echo)
    echo(rec.paragraph(spread))
    reference = outs["reference"].record
    if reference is not None:
        entry = _entry(report, reference)
        target = Target(cfg.tracking.mlflow_uri, noise.experiment)
        log = _mlflow_run(report, entry, output_dir, target) if cfg.tracking.mlflow else None
        sql = store.get()
        entry, page = sql.noise.record(entry, log)
        echo(f"noise measurement {entry.id[:12]} stored in {sql.url}: the gate reads it for this protocol")
        if entry.mlflow_run_id is not None:
            echo(f"MLflow: {page or f'run {entry.mlflow_run_id}'} (experiment {noise.experiment!r})")
    return report


def _entry(report: NoiseReport, reference: RunRecord) -> NoiseEntry:
    """The measurement as the SQL store keeps it (the gate finds it by the reference's protocol)."""
    rec, spread = report.recommendation, report.spread
    return NoiseEntry(
        id=uuid.uuid4().hex,
        protocol_key=reference.start.protocol.prompt_key(),
        model_name=reference.start.model.name,
        reference_run_id=report.reference_run,
        n=rec.n,
        flip_rate=rec.flip_rate,
        margin=rec.margin,
        shot_seed_range=spread.range if spread else None,
        report_json=json.dumps(report.to_json()),
        created_at=datetime.now(UTC).replace(tzinfo=None),
    )


def _mlflow_run(report: NoiseReport, entry: NoiseEntry, output_dir: Path, target: Target) -> NoiseRun:
    """The measurement's MLflow run: its paragraph as the description, flips and margin as metrics."""
    rec, spread = report.recommendation, report.spread
    # Units as everywhere: a share of questions (a flip rate) a fraction, as accuracies are; a margin
    # and a spread of accuracy in points (`_pts`), as the description and the gate print them.
    metrics = {"n": float(rec.n), "flip_rate_max": rec.flip_rate, "recommended_margin_pts": 100 * rec.margin}
    metrics |= {f"flip_rate/{p.name}": p.flip_rate for p in report.pairs}
    if spread is not None:
        metrics |= {"shot_seed_range_pts": 100 * spread.range} | (
            {"shot_seed_sd_pts": 100 * spread.sd} if len(spread.accuracies) > 1 else {}
        )
    return NoiseRun(
        target=target,
        name=f"noise {entry.model_name} n={rec.n}",
        noise_id=entry.id,
        description=rec.paragraph(spread),
        runs=dict(report.runs),
        metrics=metrics,
        files=(output_dir / NOISE_FILE,),
    )


def _say_spreads(spreads: dict[str, dict[str, Spread]], echo: Echo) -> None:
    for name, s in spreads.get("categories", {}).items():
        echo(f"shot seeds, {name}: accuracy range {100 * s.range:.1f} pts (SD {100 * s.sd:.2f})")
    if subjects := spreads.get("subjects"):
        worst = max(subjects, key=lambda k: subjects[k].range)
        echo(
            f"shot seeds, widest subject: {worst}, range {100 * subjects[worst].range:.1f} pts "
            f"(every subject: {NOISE_FILE})"
        )


def table(report: NoiseReport) -> str:
    """Each pair's flips and Δ against the reference, with their 95 % intervals."""
    width = max(len(p.name) for p in report.pairs) + 2
    head = f"{'against the reference':<{width}}{'n':>6} {'lost':>5} {'gained':>6}  {'flips % [95% CI]':<22} "
    head += f"{'Δ pts [95% CI]':<26}run"
    ref = report.reference_run[:12]
    rows = [f"reference: run {ref} ({report.batching.get('reference', '-')})", head, "-" * len(head)]
    for p in report.pairs:
        flips = f"{100 * p.flip_rate:5.2f} [{100 * p.flip_low:.2f}, {100 * p.flip_high:.2f}]"
        mark = "" if p.name in report.gated else "  (not gated: other prompts)"
        delta = f"{pts(p.delta)} [{pts(p.delta_low)}, {pts(p.delta_high)}]"
        own = report.runs.get(p.name, report.reference_run)[:12]  # option order: the reference's rotations
        rows.append(
            f"{p.name:<{width}}{p.n:>6} {p.lost:>5} {p.gained:>6}  {flips:<22} {delta:<26}"
            f"{own} ({report.batching.get(p.name, report.batching.get('reference', '-'))}){mark}"
        )
    return "\n".join(rows)
