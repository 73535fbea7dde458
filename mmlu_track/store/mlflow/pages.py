"""What a reviewer reads on an evaluation's MLflow pages without opening an artifact: the run's
description (`mlflow.note.content`, Markdown: the headline accuracy with its 95 % Wilson interval,
what was evaluated and how, the categories) and its dataset input (the runs table's Dataset
column: the scored questions, named after the data, their fingerprint as digest). Pure: MLflow's
entity classes only, imported where used.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from mmlu_track.records.results import Accuracy
from mmlu_track.records.run import RunRecord, RunStart
from mmlu_track.support.credentials import redact

NOTE_TAG = "mlflow.note.content"  # the run page's Markdown description


def shown(key: str, value: float) -> float:
    """A metric as MLflow's pages should show it: points and percentages (`_pts`, `_pct`) to 2
    decimals, as every report prints them; a count as it is; anything else to 4 significant
    digits (`acc_micro` 0.2105 beside its 21.05 %). The exact figures stay in the SQL store and
    results.json; MLflow's tables print a float's every digit and cut it."""
    if not math.isfinite(value) or value == int(value):
        return value
    if key.endswith(("_pts", "_pct")):
        return round(value, 2)
    return float(f"{value:.4g}")


def percent(a: Accuracy) -> str:
    """An accuracy as the pages print it, in percent with its 95 % Wilson interval and its counts:
    `21.05 % [20.4, 21.7] (2,956 / 14,042)`."""
    low, high = a.interval()
    return f"{100 * a.acc:.2f} % [{100 * low:.1f}, {100 * high:.1f}] ({a.correct:,} / {a.n:,})"


def description(record: RunRecord) -> str:
    """The run page's description: the headline first (micro accuracy with its 95 % Wilson
    interval), then what was evaluated and how, then the categories."""
    start, scores = record.start, record.scores
    cfg = start.config
    bench = "MMLU" if cfg.benchmark == "mmlu" else "MMLU-Pro"
    prompt = cfg.formulation if cfg.chat.style == "none" else f"{cfg.formulation}, chat {cfg.chat.style}"
    prompt = prompt if cfg.benchmark == "mmlu" else f"{bench}, {prompt}"
    limit = "all questions" if cfg.limit is None else f"limit={cfg.limit} per subject (seed {cfg.seed})"
    if (imported := start.imported) is not None and imported.limit is not None:
        limit = f"the first {imported.limit:g} per subject ({imported.tool}'s --limit)"
    if cfg.shards > 1:
        limit += f" · {cfg.shards} shards"
    headline = (
        f"Micro accuracy {percent(scores.micro)}, macro {100 * scores.macro.acc:.2f} % "
        f"({bench}, 95 % Wilson intervals)"
    )
    if c := record.circular:  # its headline: circular accuracy, the accuracy as given beside it
        headline = (
            f"Circular accuracy {percent(c.accuracy.micro)}, as given {100 * scores.micro.acc:.2f} %, "
            f"macro circular {100 * c.accuracy.macro.acc:.2f} % (right in every rotation of the choices, "
            "95 % Wilson interval)"
        )
    lines = [
        headline,  # plain text: the runs table's Description column shows this first line as written
        "",
        f"{start.model.name} ({start.model.dtype}, {start.model.device}) · {prompt}, k={cfg.k}, "
        f"{cfg.scoring.method} scoring · {limit} · data {start.data.fingerprint[:12]}",
    ]
    if imported is not None:
        lines.append(f"\n{imported.summary()[0].upper()}{imported.summary()[1:]}.")
    if scores.invalid:
        lines.append(f"\n{scores.invalid:,} answers were not a letter (invalid, counted wrong).")
    if c := record.circular:
        circ, mean, same = (100 * x.micro.acc for x in (c.accuracy, c.mean_rotation, c.consistency))
        lines.append(
            f"\nChoices in every rotation: circular accuracy (correct in all) {circ:.2f} %, mean over "
            f"rotations {mean:.2f} %, consistency {same:.2f} % (micro)."
        )
    if record.letter_bias:
        lines.append(f"\n{record.letter_bias.line()[0].upper()}{record.letter_bias.line()[1:]}.")
    if record.reasoning:
        lines.append(f"\n{record.reasoning.line()[0].upper()}{record.reasoning.line()[1:]}.")
    if record.annotated and start.data.annotations:
        lines.append(f"\n{record.annotated.summary()}.\n\nMMLU-Redux {start.data.annotations.summary()}.")
    # A list, not a table: MLflow renders a description's table as run-together text.
    lines += ["", "Categories, accuracy [95 % CI] (correct / n):", ""]
    lines += [f"- {name}: {percent(a)}" for name, a in scores.categories.items()]
    return "\n".join(lines)


def dataset_input(start: RunStart) -> Any:
    """The scored questions as the run's MLflow dataset input (the runs table's Dataset column):
    named after the data, identified by the questions' fingerprint."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    cfg, data = start.config, start.data
    name = cfg.data.name if cfg.limit is None else f"{cfg.data.name}-limit{cfg.limit}"
    profile = json.dumps({"questions": data.n_questions, "dev_fingerprint": data.dev_fingerprint[:12]})
    source = redact(data.path) if data.path else f"{data.source} ({cfg.data.name})"
    dataset = Dataset(name, data.fingerprint[:12], data.source, source, profile=profile)
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "evaluation")])


GATE_LINE = "**Latest gate:**"


def gate_line(note: str, verdict: str, link: str) -> str:
    """A run's description with its latest comparison's verdict as a link to that comparison's run
    (in the comparisons' experiment: MLflow nests runs only within one), replacing the one before.
    Second, after the headline: MLflow folds a description after its first lines."""
    kept = "\n".join(line for line in note.splitlines() if not line.startswith(GATE_LINE)).strip()
    head, _, rest = re.sub(r"\n{3,}", "\n\n", kept).partition("\n\n")
    return "\n\n".join(part for part in (head, f"{GATE_LINE} [{verdict}]({link})", rest) if part)
