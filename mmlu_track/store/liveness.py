"""Whether the process that claims a run is alive: on this machine the process itself is looked up
(PID, its start time and the boot: a PID alone lies after a container restart or any PID reuse);
elsewhere the scheduler's word, then its heartbeat tells, dead after `dead_after` without one. A
running process beats from a thread (`Heartbeat`), so a long unit never looks like a death.

The scheduler's word (`scheduler()`: the SLURM job and task, or the Ray task, a process runs as): a
scheduler runs one attempt of a task at a time, so a claim made by another process of the task this
process runs as is a dead attempt (a SLURM requeue, a Ray retry: both keep the id), and a SLURM job
that `squeue` no longer lists as running has no live process (a `scancel`, a crash), wherever the
new claimant runs. Where `squeue` cannot answer, heartbeats decide as before."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from mmlu_track.records.protocol import RecordError
from mmlu_track.records.stored import RunStatus, ShardStatus
from mmlu_track.settings.config import DEAD_AFTER_S
from mmlu_track.store.db import StoreError
from mmlu_track.store.orm import Run, RunShard

if TYPE_CHECKING:
    from mmlu_track.records.stored import StoredRun


# A running process beats every `tracking.heartbeat_s` (30 s; a thread, `Heartbeat`); one silent for
# `DEAD_AFTER` counts as dead wherever it ran (5 missed beats: a busy machine may delay a beat, never five).
class RunInProgress(StoreError):
    """Another live process is evaluating the run this one would resume."""


class RunFinished(StoreError):
    """The identity has a finished run already (`SqlStore.start_or_resume(once=True)`): its id."""

    def __init__(self, run_id: str) -> None:
        """`run_id`: the finished run."""
        super().__init__(f"run {run_id} with these settings is finished already")
        self.run_id = run_id


@dataclass(frozen=True)
class Shard:
    """Which part of a run's work this process scores (`shards=count shard=index`)."""

    index: int = 0
    count: int = 1

    def __str__(self) -> str:
        """`shard INDEX of COUNT`, as messages name it."""
        return f"shard {self.index} of {self.count}"


WHOLE_RUN = Shard()  # an unsharded run: its one shard


DEAD_AFTER = timedelta(seconds=DEAD_AFTER_S)


def dead_after_of(run: StoredRun, fallback: timedelta) -> timedelta:
    """The silence after which the run's own processes count as dead: its recorded
    `tracking.dead_after_s` (they beat at that run's `heartbeat_s`, whatever the reader's settings);
    `fallback` for settings this version cannot read."""
    try:
        return timedelta(seconds=run.config.tracking.dead_after_s)
    except RecordError:
        return fallback


def _boot_id() -> str:
    """The kernel's boot id: a process start time means something only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return ""


def _start_ticks(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat field 22), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]  # after the command name, which may hold spaces


# Without /proc (macOS): a random token per process stands in for its start time.
_TOKEN = "t" + uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Owner:
    """The process that claims a run or shard: host, PID, the PID's start time and the boot.

    A PID alone lies: after a container restart the tool is PID 1 again, and any PID is reused.
    PID + start time + boot id names one process for the life of a machine."""

    host: str
    pid: int
    started: str  # start ticks, or a per-process token where there is no /proc
    boot: str

    def __str__(self) -> str:
        """`host:pid:started:boot`, as a run's or shard's `owner` column holds it (`parse` reads it)."""
        return f"{self.host}:{self.pid}:{self.started}:{self.boot}"

    @property
    def short(self) -> str:
        """`host:pid`, as messages name the process."""
        return f"{self.host}:{self.pid}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """`host:pid:started:boot`, or the `host:pid` of runs stored before start times were."""
        parts = text.split(":")
        if len(parts) >= 4 and parts[-3].isdigit():
            return cls(":".join(parts[:-3]), int(parts[-3]), parts[-2], parts[-1])
        host, _, pid = text.rpartition(":")
        return cls(host, int(pid), "", "") if pid.isdigit() else None


def current_owner() -> Owner:
    """This process as an `Owner`: its host name, PID, start ticks (a per-process token where there is
    no /proc) and boot id."""
    pid = os.getpid()
    return Owner(socket.gethostname(), pid, _start_ticks(pid) or _TOKEN, _boot_id())


def liveness(
    owner: str | None,
    last_beat: datetime | None,
    now: datetime,
    dead_after: timedelta,
    claimed_as: str | None = None,
) -> str | None:
    """None when the process `owner` is alive; else why it is taken as dead (a phrase).

    On this machine (same host and boot) the process itself is looked up: dead at once when its PID
    is gone or now belongs to a process started at another time. Elsewhere (another host, another
    boot, no /proc): dead at once when the scheduler says so (`claimed_as`, what `scheduler()` said
    in the claiming process), else after `dead_after` without a heartbeat."""
    who = Owner.parse(owner) if owner else None
    if who is None:
        return "no owner recorded"
    beat = f"last beat {last_beat:%Y-%m-%d %H:%M:%S} UTC" if last_beat else "no beat recorded"
    me = current_owner()
    if who.host == me.host and who.boot in ("", me.boot):
        if not who.started.startswith("t"):
            started = _start_ticks(who.pid)
            if started is None:
                return f"process {who.short} is gone ({beat})"
            if who.started and started != who.started:
                return f"process {who.short} is gone: its PID now belongs to another process ({beat})"
            return None
        if who.started == me.started:  # no /proc where it ran: only this very process is known
            return None
    if claimed_as is not None and claimed_as == scheduler() and str(who) != str(me):
        return f"process {who.short} was an earlier attempt of {claimed_as}, which this process runs again"
    if gone := slurm_job_gone(claimed_as):
        return f"process {who.short} is gone: {gone}"
    if last_beat is not None and now - last_beat < dead_after:
        return None
    return f"process {who.short} has not beaten for over {dead_after.total_seconds():g} s ({beat})"


def scheduler() -> str | None:
    """The scheduler's name for this process: `slurm:JOB[_TASK].PROCID` (a requeued job keeps its
    id) or `ray:TASK_ID` (a retried task keeps its id); None when run by hand."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        array = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
        name = f"{array[0]}_{array[1]}" if all(array) else job
        return f"slurm:{name}.{os.environ.get('SLURM_PROCID', '0')}"
    ray: Any = sys.modules.get("ray")  # imported by Ray's worker when Ray runs this process
    if ray is None or not ray.is_initialized():
        return None
    task = ray.get_runtime_context().get_task_id()
    return f"ray:{task}" if task else None


def slurm_job_gone(name: str | None) -> str | None:
    """Why the SLURM job `name` (as `scheduler()` writes it) has no live process, per `squeue`;
    None when it runs, when it is not a SLURM job, or when `squeue` cannot tell (then heartbeats do)."""
    if not name or not name.startswith("slurm:") or shutil.which("squeue") is None:
        return None
    job = name[len("slurm:") :].rpartition(".")[0]
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    state = out.stdout.strip()
    if out.returncode == 0 and state in ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING"):
        return None
    if out.returncode == 0 and state:
        return f"SLURM job {job} is {state.lower()}"
    if out.returncode != 0 and "Invalid job id" not in out.stderr:
        return None  # squeue could not ask the controller: no word either way
    return f"SLURM job {job} has ended"


class Heartbeat:
    """A thread that beats for this process's claim on a run every `every` seconds, so that
    others can tell it alive wherever they run (`liveness`); a failed beat is left to the next
    commit to report."""

    def __init__(self, beat: Callable[[], None], every: float) -> None:
        """`beat`: records one beat (a `StoreError` it raises is dropped); `every`: seconds between beats.
        Nothing beats before `__enter__`."""
        self.beat, self.every = beat, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mmlu_track-heartbeat", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            with contextlib.suppress(StoreError):
                self.beat()

    def __enter__(self) -> Heartbeat:
        """Start beating, in a daemon thread; the heartbeat back."""
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop beating and wait for the thread to end; an exception from the block goes on."""
        self._stop.set()
        self._thread.join()


def take_over(
    s: Session, run: Run, shard: Shard, output_dir: str | None, now: datetime, dead_after: timedelta
) -> None:
    """Claim `shard` of an unfinished `run` for this process (`SqlStore.start_or_resume`'s transaction);
    `RunInProgress` while a live process holds the shard or finalizes the run."""
    claim = s.get(RunShard, (run.id, shard.count, shard.index))
    if claim is not None and claim.status == ShardStatus.RUNNING:
        last = claim.heartbeat_at or run.created_at
        if liveness(claim.owner, last, now, dead_after, claim.scheduler) is None:
            which = "" if shard.count == 1 else f" ({shard})"
            who = Owner.parse(claim.owner or "")
            raise RunInProgress(
                f"run {run.id}{which} with these settings is being evaluated by process "
                f"{who.short if who else claim.owner} (last beat {last:%Y-%m-%d %H:%M:%S} UTC): "
                "wait for it, or stop it and run the same command again to resume; "
                "tracking.resume=false starts a separate run"
            )
    if run.status == RunStatus.FINALIZING and liveness(run.owner, run.heartbeat_at, now, dead_after) is None:
        who = Owner.parse(run.owner or "")
        by = who.short if who else run.owner
        raise RunInProgress(f"run {run.id} is being finalized by process {by}: wait for it")
    if claim is None:
        claim = RunShard(run_id=run.id, shards=shard.count, shard=shard.index)
        s.add(claim)
    claim.status, claim.owner, claim.heartbeat_at = ShardStatus.RUNNING, str(current_owner()), now
    claim.scheduler = scheduler()
    if run.status != RunStatus.RUNNING:  # failed, or a finalizer that died: this process takes it on
        run.status, run.owner, run.heartbeat_at = RunStatus.RUNNING, str(current_owner()), now
    if shard.count == 1:
        run.output_dir = output_dir
