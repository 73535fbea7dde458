"""Whether the process that claims a run is alive: on this machine the process itself is looked up
(PID, its start time and the boot: a PID alone lies after a container restart or any PID reuse);
elsewhere its heartbeat tells, dead after `dead_after` without one. A running process beats from a
thread (`Heartbeat`), so a long unit never looks like a death."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from mmlu_track.store.db import StoreError

# A running process beats every `tracking.heartbeat_s` (30 s; a thread, `Heartbeat`); one silent for
# `DEAD_AFTER` counts as dead wherever it ran (5 missed beats: a busy machine may delay a beat, never five).
DEAD_AFTER = timedelta(seconds=150)


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
        return f"{self.host}:{self.pid}:{self.started}:{self.boot}"

    @property
    def short(self) -> str:
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
    pid = os.getpid()
    return Owner(socket.gethostname(), pid, _start_ticks(pid) or _TOKEN, _boot_id())


def liveness(
    owner: str | None, last_beat: datetime | None, now: datetime, dead_after: timedelta
) -> str | None:
    """None when the process `owner` is alive; else why it is taken as dead (a phrase).

    On this machine (same host and boot) the process itself is looked up: dead at once when its PID
    is gone or now belongs to a process started at another time. Elsewhere (another host, another
    boot, no /proc): dead after `dead_after` without a heartbeat."""
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
    if last_beat is not None and now - last_beat < dead_after:
        return None
    return f"process {who.short} has not beaten for over {dead_after.total_seconds():g} s ({beat})"


class Heartbeat:
    """A thread that beats for this process's claim on a run every `every` seconds, so that
    others can tell it alive wherever they run (`liveness`); a failed beat is left to the next
    commit to report."""

    def __init__(self, beat: Callable[[], None], every: float) -> None:
        self.beat, self.every = beat, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mmlu_track-heartbeat", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            with contextlib.suppress(StoreError):
                self.beat()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
