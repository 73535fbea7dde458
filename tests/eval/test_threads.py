"""`threads=auto`: the CPUs this process may use (affinity, cgroup quota v1 and v2, SLURM's and a
launcher's word), shared among the shards joblib runs at once on this host; a number wins; the
choice is checked, recorded in the run and printed once, and no part of its identity (issue 50)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mmlu_track.eval.threads import available, choose

from ..conftest import CliResult

Cli = Callable[..., CliResult]
AFFINITY = len(os.sched_getaffinity(0))


def _cgroup(tmp_path: Path, v2: str | None = None, v1: tuple[str, str] | None = None) -> Path:
    tmp_path.mkdir()
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2)
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(v1[0])
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(v1[1])
    return tmp_path


@pytest.fixture
def sixteen_cpus(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A 16-CPU affinity mask and no thread count in the environment; the monkeypatch, to set more."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)))
    return monkeypatch


def test_auto_takes_the_smallest_limit_and_shares_it_among_the_shards_on_this_host(
    tmp_path: Path, sixteen_cpus: pytest.MonkeyPatch
) -> None:
    monkeypatch = sixteen_cpus
    assert available(tmp_path / "none") == (16, ["affinity 16"])
    assert choose("auto", 1, _cgroup(tmp_path / "a", v2="max 100000")).count == 16  # unlimited
    quota = _cgroup(tmp_path / "b", v2="150000 100000")  # a container's 1.5 CPUs: 2 threads
    assert choose("auto", 1, quota) == choose("auto", 1, quota)
    assert choose("auto", 1, quota).count == 2
    assert "cgroup quota 1.5" in choose("auto", 1, quota).why
    assert choose("auto", 1, _cgroup(tmp_path / "c", v1=("400000", "100000"))).count == 4  # cgroup v1
    assert choose("auto", 1, _cgroup(tmp_path / "d", v1=("-1", "100000"))).count == 16  # v1 unlimited
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    six = choose("auto", 2, tmp_path / "none")  # two joblib shards share SLURM's 6
    assert six.count == 3
    assert six.why == (
        "threads=auto: 3 (affinity 16, SLURM_CPUS_PER_TASK=6, shared by 2 shards on this host); fewer "
        "while other work keeps these CPUs busy"
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a launcher's (Ray's, joblib's) or the user's word
    assert choose("auto", 1, tmp_path / "none").count == 1
    assert choose("auto", 8, tmp_path / "none").count == 1  # never 0
    assert choose(5, 4, quota).count == 5  # a number wins over every limit
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")  # unreadable: ignored, not fatal
    assert choose("auto", 1, tmp_path / "none").count == 6


def test_the_quota_is_read_for_this_processs_own_cgroup_and_every_one_above_it(
    tmp_path: Path, sixteen_cpus: pytest.MonkeyPatch
) -> None:
    root, proc = tmp_path / "fs", tmp_path / "cgroup"
    (root / "job" / "step").mkdir(parents=True)
    (root / "cpu.max").write_text("max 100000")
    (root / "job" / "cpu.max").write_text("300000 100000")  # the job's 3 CPUs
    (root / "job" / "step" / "cpu.max").write_text("max 100000")  # its step sets none of its own
    proc.write_text("0::/job/step\n")
    assert choose("auto", 1, root, proc).count == 3  # before: the mount's root only, 16
    assert "cgroup quota 3" in choose("auto", 1, root, proc).why
    (root / "job" / "step" / "cpu.max").write_text("100000 100000")
    assert choose("auto", 1, root, proc).count == 1  # the smallest on the way up
    v1 = root / "cpu" / "batch" / "task"  # cgroup v1: the cpu controller's own line and folder
    v1.mkdir(parents=True)
    (v1.parent / "cpu.cfs_quota_us").write_text("150000")
    (v1.parent / "cpu.cfs_period_us").write_text("100000")
    proc.write_text("12:cpu,cpuacct:/batch/task\n11:memory:/elsewhere\n0::/\n")
    assert choose("auto", 1, root, proc).count == 2
    for unknown in ("0::/../outside\n", "garbage\n"):  # outside its namespace, or unreadable: the root
        proc.write_text(unknown)
        assert choose("auto", 1, root, proc).count == 16
    assert choose("auto", 1, root, tmp_path / "missing").count == 16


def test_joblib_shards_on_one_host_share_it_other_launchers_do_not() -> None:
    from hydra.types import RunMode

    from mmlu_track.commands.launchers import host_share

    joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"

    def hc(target: str, n_jobs: int | None = None, mode: RunMode = RunMode.MULTIRUN) -> object:
        launcher = {"_target_": target, **({"n_jobs": n_jobs} if n_jobs is not None else {})}
        return OmegaConf.create({"mode": mode, "launcher": launcher})

    assert host_share(hc(joblib, 10), 4) == 4  # at most the run's shards
    assert host_share(hc(joblib, 2), 4) == 2
    assert host_share(hc(joblib, -1), 64) == (os.cpu_count() or 1)  # every core of the host
    assert host_share(hc("hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"), 4) == 1
    assert host_share(hc(joblib, 4, RunMode.RUN), 4) == 1  # a single run launches nothing


def test_threads_are_checked_recorded_printed_once_and_no_part_of_the_identity(
    cli: Cli, tmp_path: Path
) -> None:
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}"
    args = ["experiment=smoke", "device=cpu", "tracking.mlflow=false", db]
    bad = cli("eval", *args, "threads=0", f"hydra.run.dir={tmp_path / 'bad'}", cwd=tmp_path)
    assert bad.code == 2
    assert bad.errors == ["mmlu_track: error: threads=0 must be auto or a number of CPU threads in 1..4096"]
    first = cli("eval", *args, "threads=1", f"hydra.run.dir={tmp_path / 'one'}", cwd=tmp_path)
    assert first.code == 0, first.err
    assert first.out.count("scoring with threads=1") == 1
    host = json.loads((tmp_path / "one" / "results.json").read_text())["host"]
    assert host["threads"] == "threads=1"
    # Another thread count is the same run (result-neutral): the finished run is taken as it is;
    # scored again on purpose, a second finished run of the same identity, never a different one.
    from mmlu_track.store.sql import SqlStore

    same = cli("eval", *args, "threads=2", f"hydra.run.dir={tmp_path / 'two'}", cwd=tmp_path)
    assert same.code == 0, same.err
    assert same.out.startswith("already evaluated: run ")
    rerun = ["threads=auto", "tracking.rerun=true"]
    again = cli("eval", *args, *rerun, f"hydra.run.dir={tmp_path / 'auto'}", cwd=tmp_path)
    assert again.code == 0, again.err
    assert "scoring with threads=auto: " in again.out
    store = SqlStore(db.split("=", 1)[1])
    identities = {r.identity for r in store.runs()}
    store.close()
    assert len(identities) == 1


def _stat(path: Path, *cpus: tuple[int, int]) -> Path:
    """A /proc/stat with one line per CPU: (busy, idle) ticks, busy spread as the kernel's fields are."""
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]  # the machine's total: never read as a CPU
    for i, (busy, idle) in enumerate(cpus):
        lines.append(f"cpu{i} {busy - 3} 1 1 {idle - 5} 5 1 0 0 0 0")  # user nice system idle iowait irq…
    path.write_text("\n".join([*lines, "intr 12345", "procs_running 3"]) + "\n")
    return path


class _Clock:
    """Wall time and this process's CPU time, moved by hand."""

    def __init__(self) -> None:
        self.wall = self.own = 0.0

    def tick(self, wall: float, own: float) -> None:
        self.wall += wall
        self.own += own


def test_busy_ticks_count_only_this_processs_cpus_and_leave_out_idle_and_iowait(tmp_path: Path) -> None:
    from mmlu_track.eval.threads import busy_ticks

    stat = _stat(tmp_path / "stat", (100, 50), (30, 500), (7, 7))
    assert busy_ticks(frozenset({0, 1}), stat) == 130
    assert busy_ticks(frozenset({2}), stat) == 7
    assert busy_ticks(frozenset({9}), stat) is None  # none of its CPUs listed
    assert busy_ticks(frozenset({0}), tmp_path / "missing") is None  # not Linux: the ceiling stays


def test_auto_lowers_its_threads_while_another_process_is_busy_and_takes_them_back(tmp_path: Path) -> None:
    from mmlu_track.eval.threads import Governor, Readings

    stat, clock, applied = tmp_path / "stat", _Clock(), []
    readings = Readings(stat, lambda: clock.wall, lambda: clock.own, hz=100)
    _stat(stat, (0, 0), (0, 0))
    gov = Governor(2, applied.append, frozenset({0, 1}), readings, every_s=0.5)
    # Quiet: this process used both CPUs for a second (its own 2 s of CPU time): 2 stay.
    clock.tick(1.0, 2.0)
    _stat(stat, (100, 0), (100, 0))
    assert gov.check() == 2
    assert applied == []
    # Another process spins on a core: of 2 busy CPU-seconds, 1.3 were this process's (2 threads
    # preempted in turn): 0.7 CPU is the other's, 1.3 free, rounded: 1 thread.
    clock.tick(1.0, 1.3)
    _stat(stat, (200, 0), (200, 0))
    assert gov.check() == 1
    assert applied == [1]
    clock.tick(0.2, 0.2)  # within every_s: not read again
    _stat(stat, (220, 0), (220, 0))
    assert gov.check() == 1
    # One thread beside it: each busy a whole CPU; still 1.
    clock.tick(1.0, 1.0)
    _stat(stat, (320, 0), (320, 0))
    assert gov.check() == 1
    # It ended: one CPU idle for the last second: both again.
    clock.tick(1.0, 1.0)
    _stat(stat, (420, 0), (320, 100))
    assert gov.check() == 2
    assert applied == [1, 2]
    # Two busy beside one thread: never fewer than 1.
    clock.tick(1.0, 0.7)
    _stat(stat, (520, 0), (420, 100))
    assert gov.check() == 1
    # A ceiling of 1 (or no /proc/stat) has nothing to lower: never read.
    assert Governor(1, applied.append, frozenset({0}), readings).check() == 1
    nothing = Readings(tmp_path / "missing", lambda: clock.wall, lambda: clock.own)
    assert Governor(4, applied.append, frozenset({0}), nothing).check() == 4
    assert Governor(4, applied.append, frozenset(), readings).check() == 4  # no affinity call (macOS)


def test_only_auto_is_governed_and_the_threads_it_starts_with_are_what_was_resolved() -> None:
    import torch

    from mmlu_track.eval.in_process import load_backend

    from ..conftest import compose_eval

    before = torch.get_num_threads()
    try:
        auto = load_backend(compose_eval(["model=tiny", "device=cpu", "threads=auto"]), 2)
        assert auto.governor is not None
        assert auto.governor.ceiling == 2
        assert torch.get_num_threads() == 2
        fixed = load_backend(compose_eval(["model=tiny", "device=cpu", "threads=2"]), 2)
        assert fixed.governor is None  # a number is what the user asked for
    finally:
        torch.set_num_threads(before)
