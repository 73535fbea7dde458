"""What a reviewer reads in MLflow's UI (issue 42), read back through MLflow's client from a real
`mlflow server`: two versions of a random model evaluated and compared, each page's name, metrics
(their order and rounding), colours, description and artifacts, and the experiments' kind."""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mmlu_track.pipeline.evaluate import QUIET, run
from mmlu_track.store.mlflow import views as mlflow_views
from mmlu_track.store.mlflow.pages import shown

from ...conftest import CliResult, tiny_run_cfg

Cli = Callable[..., CliResult]


def _table(client: MlflowClient, run_id: str, path: str, into: Path) -> dict[str, list[object]]:
    """A table logged with `log_table`, as MLflow's artifact view reads it ({columns, data}).
    (MlflowClient.load_table searches through the global tracking URI, not the client's.)"""
    doc = json.loads(Path(client.download_artifacts(run_id, path, str(into))).read_text())
    return {c: [row[i] for row in doc["data"]] for i, c in enumerate(doc["columns"])}


def _png_size(data: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    return width, height


def test_a_reviewer_reads_evaluations_and_their_comparison_in_mlflow(
    mlflow_server: str, tmp_path: Path, cli: Cli
) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    common = ("tracking.mlflow=true", f"tracking.mlflow_uri={mlflow_server}", "tracking.experiment=review")
    outs = [
        run(
            tiny_run_cfg(db, *common, f"model.tiny_seed={seed}", "limit=20", model="tiny"),
            tmp_path / f"e{seed}",
            display=QUIET,
        )
        for seed in (1, 2)
    ]
    client = MlflowClient(tracking_uri=mlflow_server)
    evaluation = client.get_run(str(outs[1].mlflow_run_id))
    exp = client.get_experiment(evaluation.info.experiment_id)
    # The experiment's link opens the runs table, not MLflow 3's empty GenAI overview
    assert exp.tags[mlflow_views.EXPERIMENT_KIND_TAG] == "custom_model_development"

    # The evaluation's page: the headline first, rounded as printed, then the 57-subject detail
    metrics = evaluation.data.metrics
    keys = list(metrics)
    assert keys.index("acc_micro") < keys.index("acc/anatomy")
    assert keys.index("acc/category/STEM") < keys.index("acc/abstract_algebra")
    micro = outs[1].scores.micro.acc
    assert metrics["acc_micro"] == shown("acc_micro", micro) == float(f"{micro:.4g}")
    assert all(len(repr(v).split(".")[-1]) <= 6 for v in metrics.values())  # never 0.2105263157894737
    assert evaluation.data.tags[mlflow_views.RUN_COLOR_TAG] in mlflow_views.EVALUATION_COLORS
    note = evaluation.data.tags["mlflow.note.content"]
    assert "|" not in note  # MLflow's description shows a table as run-together text
    assert "\n- STEM: " in note
    assert evaluation.info.run_name == "tiny-random-llama@seed2-k2-logprob-2subjects-float32-limit20"

    # Its questions as a table the artifact view filters
    table = _table(client, evaluation.info.run_id, "questions.json", tmp_path / "t1")
    columns = {"subject", "index", "question", "choices", "gold", "prediction", "correct", "logprob_A"}
    assert columns <= set(table)
    assert len(table["correct"]) == 40
    assert sum(map(bool, table["correct"])) == outs[1].scores.micro.correct
    assert all(isinstance(q, str) and q for q in table["question"])

    got = cli(
        "compare",
        f"tracking.db_url={db}",
        *common[:2],
        f"baseline={outs[0].run_id}",
        f"candidate={outs[1].run_id}",
        "compare_experiment=review_compare",
        f"hydra.run.dir={tmp_path / 'cmp'}",
        cwd=tmp_path,
    )
    assert got.code == 1, got.err  # 40 questions: inconclusive at best
    report = json.loads((tmp_path / "cmp" / "report.json").read_text())
    verdict = report["verdict"]["status"]
    (comparison,) = client.search_runs(
        [client.get_experiment_by_name("review_compare").experiment_id]  # type: ignore[union-attr]
    )
    assert comparison.info.run_name.startswith(f"{verdict.upper()}: tiny-random-llama, baseline → candidate:")
    assert "model.tiny_seed 1 → 2" in comparison.info.run_name
    assert comparison.data.tags[mlflow_views.RUN_COLOR_TAG] == mlflow_views.VERDICT_COLORS[verdict]
    cm = comparison.data.metrics
    # the bound that decided, in points, rounded as the report prints it
    assert cm["gate/lower_bound_pts"] == round(100 * report["noninferiority"]["lower_bound"], 2)
    assert cm["gate/delta_micro_pts"] == round(100 * report["micro"]["delta"], 2)
    assert comparison.data.params["margin_pts"] == "1.0"
    # every column and chart of the saved view names a metric that exists
    cmp_exp = client.get_experiment(comparison.info.experiment_id)
    assert cmp_exp.tags[mlflow_views.EXPERIMENT_KIND_TAG] == "custom_model_development"
    state = json.loads(json.loads(cmp_exp.tags[mlflow_views.VIEW_TAG])["state"])
    charted = {k for k in cm if re.search(state["chartsSearchFilter"], k)}
    assert charted == {
        "gate/delta_micro_pts",
        "gate/lower_bound_pts",
        "baseline/acc_micro",
        "candidate/acc_micro",
    }
    assert "metrics.`gate/lower_bound_pts`" in state["selectedColumns"]
    # What decides comes first, beside the name (issue 55: the verdict was only the name's prefix, and
    # Δ and the bound sat off-screen after the description): each names what this run carries.
    first = state["selectedColumns"][:4]
    assert first == ["tags.`verdict`", "metrics.`gate/delta_micro_pts`", "metrics.`gate/lower_bound_pts`",
                     "params.`margin_pts`"]  # fmt: skip
    assert comparison.data.tags["verdict"] == verdict

    # report.md as MLflow's artifact viewer shows it: no raw HTML, short tables, words before emoji
    folder = Path(client.download_artifacts(comparison.info.run_id, "", str(tmp_path / "dl")))
    md = (folder / "report.md").read_text()
    assert "<details>" not in md
    heading = md.splitlines()[0]
    assert heading.startswith(f"## MMLU release gate: {verdict.upper()} ")
    assert "(exit" not in heading
    tables = re.findall(r"(?:^\|.*\n)+", md, flags=re.MULTILINE)
    assert tables
    assert all(len(t.splitlines()) - 2 <= 8 for t in tables)  # header and alignment rows aside
    assert not [line for t in tables for line in t.splitlines() if "_" in line.split("|")[1]]
    assert "\n### All 2 subjects, sorted by Δ\n" in md
    # deltas.png: both panels in a figure of a readable height
    width, height = _png_size((folder / "deltas.png").read_bytes())
    assert width == 880
    assert height < 1100
    # the paired questions, the changed ones first
    paired = _table(client, comparison.info.run_id, "paired_questions.json", tmp_path / "t2")
    changes = paired["change"]
    assert len(changes) == 40
    # each with its question's text, read again from the runs' data by the compare command
    text = {(s, i): q for s, i, q in zip(table["subject"], table["index"], table["question"], strict=True)}
    keys = zip(paired["subject"], paired["index"], strict=True)
    assert [text[(s, i)] for s, i in keys] == paired["question"]
    assert changes.count("lost") == report["micro"]["lost"]
    assert changes.count("gained") == report["micro"]["gained"]
    n_changed = sum(1 for c in changes if c)
    assert all(changes[:n_changed])  # the changed questions come first
    assert not any(changes[n_changed:])

    # the candidate's page names this verdict
    candidate = client.get_run(str(outs[1].mlflow_run_id))
    assert candidate.data.tags["mmlu_track.gate"].startswith(
        f"{verdict.upper()} vs baseline tiny-random-llama@seed1"
    )


@pytest.mark.parametrize("verdict", sorted(mlflow_views.VERDICT_COLORS))
def test_no_verdict_colour_is_an_evaluations_colour(verdict: str) -> None:
    """A comparison's dot says its verdict; an evaluation's never looks like one."""
    assert mlflow_views.VERDICT_COLORS[verdict] not in mlflow_views.EVALUATION_COLORS
    assert mlflow_views.evaluation_color("a" * 32) == mlflow_views.evaluation_color("a" * 32)
