"""`python -m mmlu_track.runs import PATH`: lm-eval's `--log_samples` output stored as runs
(`pipeline.imported`), each printed with its id and name; the gate then compares them as any run.

PATH is lm-eval's `--output_path` folder, a model folder in it, or one `results_<date>.json`; a
`leaderboard_mmlu_pro` run is matched to the MMLU-Pro data it ran on (`--data FOLDER`, else the hub).
Exit codes: 0 imported (or imported before), 2 unusable input (one line, nothing recorded), 70 a bug.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mmlu_track.settings.config import DataConfig, TrackingConfig
from mmlu_track.support.credentials import redact

HELP = "store lm-eval's --log_samples output (a folder or a results_<date>.json) as runs"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The `import` subcommand's parser, added to `sub` (the runs command's subparsers)."""
    p: argparse.ArgumentParser = sub.add_parser(
        "import",
        help=HELP,
        description=HELP + ": each results file with its samples files is one run",
        epilog="exit codes: 0 imported (or imported before), 2 unusable input (one line on stderr, nothing "
        "recorded), 70 a bug in mmlu_track",
    )
    p.add_argument(
        "path", type=Path, help="lm-eval's --output_path folder, a model folder in it, or a results file"
    )
    p.add_argument("--name", default=None, help="the model name to store the runs under (default: lm-eval's)")
    p.add_argument(
        "--data",
        type=Path,
        default=None,
        help="leaderboard_mmlu_pro runs: the MMLU-Pro folder they ran on (test.jsonl and validation.jsonl, "
        "or the hub's Parquet files; default: TIGER-Lab/MMLU-Pro from the hub)",
    )
    p.add_argument(
        "--mlflow-uri", default=None, help="tracking URI (default: MLFLOW_TRACKING_URI, else ./mlflow.db)"
    )
    p.add_argument("--experiment", default="mmlu_track", help="the MLflow experiment (default: mmlu_track)")
    p.add_argument(
        "--no-mlflow", action="store_true", help="record in the SQL store only (runs sync logs them later)"
    )
    return p


def run(args: argparse.Namespace) -> int:
    """Import every run at `args.path` into the store at `args.db`; print each run's line."""
    from mmlu_track.eval.data import DataError
    from mmlu_track.pipeline.imported import PRO_HUB, read_all, store_run
    from mmlu_track.settings.resolved import Resolved
    from mmlu_track.store.db import parse_url
    from mmlu_track.store.locations import mlflow_uri
    from mmlu_track.store.recorder import StoreOnDemand

    if args.name is not None and (not args.name.strip() or args.name != " ".join(args.name.split())):
        raise DataError(f"--name {args.name!r}: a model name is one line of text without surrounding spaces")
    if (url := parse_url(args.db)).get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        raise DataError(
            f"--db {args.db}: an in-memory database keeps nothing: give a file (sqlite:///runs.db)"
        )
    tracking = TrackingConfig(
        db_url=args.db, mlflow=not args.no_mlflow, mlflow_uri=args.mlflow_uri, experiment=args.experiment
    )
    resolved = Resolved(mlflow_uri=mlflow_uri(args.mlflow_uri) if tracking.mlflow else None, threads=None)
    pro = PRO_HUB if args.data is None else DataConfig(name="mmlu_pro", source="local", path=str(args.data))
    reads = read_all(args.path, args.name, (tracking, resolved), pro)  # all refused before any is recorded
    store = StoreOnDemand(tracking)
    try:
        for read in reads:
            done = store_run(read, store)
            if done.already:
                print(
                    f"{read.run.results_file}: imported before as run {done.run_id} ({done.name}, "
                    f"{done.n_questions} questions): nothing added"
                )
                continue
            micro = f", micro {100 * done.scores.micro.acc:.2f} %" if done.scores else ""
            mlflow = f", MLflow run {done.mlflow_run_id}" if done.mlflow_run_id else ""
            print(
                f"imported run {done.run_id} ({done.name}, {done.n_questions} questions, "
                f"{done.prompts} prompts{micro}{mlflow}) from {read.run.results_file}"
            )
        print(f"{len(reads)} lm-eval run{'s' if len(reads) != 1 else ''} in {redact(args.db)}")
    finally:
        store.close()
    return 0
