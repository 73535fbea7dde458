"""How many CPU threads in-process scoring may use (`threads=auto|N`), and setting them in torch.

torch's default is one thread per core of the host, whatever this process may actually use: a SLURM
task given 2 CPUs of a 64-core node, a container with a quota of 4, two shards launched on one host
by joblib, each still start 64 threads, and a parallel region waits for its slowest thread — on a
busy node many times over. `threads=auto` takes the smallest of what the process may use:

- the CPUs of its affinity mask (`os.sched_getaffinity`: taskset, SLURM's and Ray's binding);
- its cgroup's quota, rounded up (`cpu.max` of cgroup v2, `cpu.cfs_quota_us / cpu.cfs_period_us`
  of v1), read for the cgroup `/proc/self/cgroup` names and every one above it: a container or a
  CI runner with a CPU limit, a job a host placed in a limited cgroup;
- `SLURM_CPUS_PER_TASK` where set, and `OMP_NUM_THREADS` where a launcher or the user set it;

then divides it among the shards the launcher runs at once on this host (`Origin.host_share`:
joblib's jobs). An explicit `threads=N` wins. The run's preparation resolves it to a number; the
in-process backend sets torch's intra- and inter-op threads to it as it loads (this module never
imports torch). The choice and its reason are recorded in the run (`host.threads`, result-neutral:
scores do not depend on it) and printed once. Served runs compute on the server: nothing is set.

Those limits say what the process may use, not what is free: beside one process spinning on a
core of a 2-core machine, 2 threads ran 2.2x slower than 1 (a parallel region waits for the thread
the other process preempts). So `auto` is also a ceiling that a `Governor` lowers while the run
goes: every half second of scoring it reads how busy this process's CPUs were (`/proc/stat`'s
per-CPU lines) less what this process itself used (`time.process_time`), and sets the threads to
the CPUs left free, rounded, between 1 and the ceiling — up again when the other work ends.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")  # which cgroup this process is in
PROC_STAT = Path("/proc/stat")  # each CPU's time since boot, busy and idle, in clock ticks


@dataclass(frozen=True)
class Threads:
    """The threads a run scores with, and why (one line, recorded and printed)."""

    count: int
    why: str


def _own_paths(proc: Path) -> tuple[str, str]:
    """This process's cgroup in the v2 hierarchy and in v1's cpu controller (`/proc/self/cgroup`:
    `0::/path` and `N:cpu,cpuacct:/path`); "/" where unknown, or where outside its namespace."""
    v2 = v1 = "/"
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return v2, v1
    for line in lines:
        hierarchy, controllers, path = [*line.split(":", 2), "", ""][:3]
        path = path if path.startswith("/") and ".." not in path.split("/") else "/"
        if hierarchy == "0" and not controllers:
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _chain(mount: Path, path: str) -> list[Path]:
    """The folder of cgroup `path` under `mount` and each one above it: a quota set on any
    ancestor (a SLURM job above its step, a slice above its service) limits the process too."""
    parts = [p for p in path.split("/") if p]
    return [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _quota_v2(folder: Path) -> float | None:
    try:  # "max 100000" (unlimited) or "200000 100000" (2 CPUs)
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _quota_v1(folder: Path) -> float | None:
    try:
        quota_us = int((folder / "cpu.cfs_quota_us").read_text())
        period_us = int((folder / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def _cgroup_quota(root: Path = CGROUP, proc: Path = PROC_CGROUP) -> float | None:
    """CPUs this process's cgroup may use (quota / period): the smallest quota on its own cgroup
    and its ancestors, in v2 and in v1's cpu controller (a host places a job in a sub-cgroup; a
    container sees its own as the root); None when unlimited or unreadable."""
    v2, v1 = _own_paths(proc)
    found = [_quota_v2(folder) for folder in _chain(root, v2)]
    found += [_quota_v1(folder) for folder in _chain(root / "cpu", v1)]
    quotas = [q for q in found if q is not None]
    return min(quotas) if quotas else None


def _env_count(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def available(root: Path = CGROUP, proc: Path = PROC_CGROUP) -> tuple[int, list[str]]:
    """The CPUs this process may use, and each limit that says so."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limits = [(affinity, f"affinity {affinity}")]
    if (quota := _cgroup_quota(root, proc)) is not None:
        limits.append((max(1, math.ceil(quota)), f"cgroup quota {quota:g}"))
    for name in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        if (count := _env_count(name)) is not None:
            limits.append((count, f"{name}={count}"))
    return min(n for n, _ in limits), [why for _, why in limits]


def choose(setting: int | str, host_share: int = 1, root: Path = CGROUP, proc: Path = PROC_CGROUP) -> Threads:
    """`threads=auto` (module docstring) or the number given."""
    if setting != "auto":
        return Threads(int(setting), f"threads={setting}")
    cpus, limits = available(root, proc)
    count = max(1, cpus // max(1, host_share))
    shared = f", shared by {host_share} shards on this host" if host_share > 1 else ""
    fewer = "; fewer while other work keeps these CPUs busy" if count > 1 else ""
    return Threads(count, f"threads=auto: {count} ({', '.join(limits)}{shared}){fewer}")


def busy_ticks(cpus: frozenset[int], stat: Path = PROC_STAT) -> int | None:
    """Clock ticks the CPUs `cpus` have been busy since boot (all but idle and iowait), from
    `/proc/stat`'s per-CPU lines; None where that is unreadable or lists none of them."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    total, seen = 0, 0
    for line in lines:
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(ticks) - ticks[3] - ticks[4]
        seen += 1
    return total if seen else None


@dataclass(frozen=True)
class Readings:
    """Where a `Governor` reads its figures: the kernel's per-CPU counts (`stat`, in ticks of
    `hz`), wall time (`clock`) and this process's CPU time, every thread's (`own`)."""

    stat: Path = PROC_STAT
    clock: Callable[[], float] = time.monotonic
    own: Callable[[], float] = time.process_time
    hz: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Governor:
    """`threads=auto` while the run goes (module docstring): `check` between batches sets the
    threads (through `apply`) to the CPUs other work leaves free, between 1 and `ceiling`."""

    def __init__(
        self,
        ceiling: int,
        apply: Callable[[int], None],
        cpus: frozenset[int] | None = None,
        readings: Readings | None = None,
        every_s: float = 0.5,
    ) -> None:
        """Start watching `cpus` (default: this process's affinity) at `ceiling` threads (already
        set), checking at most every `every_s` seconds; `readings`: where the figures come from."""
        self.ceiling, self.current, self._apply = ceiling, ceiling, apply
        if cpus is None:  # none where the OS has no affinity call (macOS): nothing read, the ceiling kept
            cpus = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
        self._cpus = cpus
        self._read, self._every = readings or Readings(), every_s
        self._since = self._sample()

    def _sample(self) -> tuple[float, int, float] | None:
        busy = busy_ticks(self._cpus, self._read.stat)
        return None if busy is None else (self._read.clock(), busy, self._read.own())

    def check(self) -> int:
        """The threads to score with now: changed (and applied) after at least `every_s` of wall
        time, from what other processes used of these CPUs in that time."""
        if self._since is None or self.ceiling <= 1:
            return self.current  # nothing to read (not Linux), or nothing to lower
        wall0, busy0, own0 = self._since
        if self._read.clock() - wall0 < self._every:
            return self.current
        now = self._sample()
        if now is None:
            return self.current
        wall, busy, own = now
        others = ((busy - busy0) / self._read.hz - (own - own0)) / (wall - wall0)
        free = len(self._cpus) - max(0.0, others)
        want = max(1, min(self.ceiling, int(free + 0.5)))
        self._since = now
        if want != self.current:
            self._apply(want)
            self.current = want
        return self.current
