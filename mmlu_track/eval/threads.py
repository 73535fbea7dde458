"""How many CPU threads in-process scoring may use (`threads=auto|N`), and setting them in torch.

torch's default is one thread per core of the host, whatever this process may actually use: a SLURM
task given 2 CPUs of a 64-core node, a container with a quota of 4, two shards launched on one host
by joblib, each still start 64 threads, and a parallel region waits for its slowest thread — on a
busy node many times over. `threads=auto` takes the smallest of what the process may use:

- the CPUs of its affinity mask (`os.sched_getaffinity`: taskset, SLURM's and Ray's binding);
- its cgroup's quota, rounded up (`cpu.max` of cgroup v2, `cpu.cfs_quota_us / cpu.cfs_period_us`
  of v1): a container or a CI runner with a CPU limit;
- `SLURM_CPUS_PER_TASK` where set, and `OMP_NUM_THREADS` where a launcher or the user set it;

then divides it among the shards the launcher runs at once on this host (`Origin.host_share`:
joblib's jobs). An explicit `threads=N` wins. The run's preparation resolves it to a number; the
in-process backend sets torch's intra- and inter-op threads to it as it loads (this module never
imports torch). The choice and its reason are recorded in the run (`host.threads`, result-neutral:
scores do not depend on it) and printed once. Served runs compute on the server: nothing is set.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Threads:
    """The threads a run scores with, and why (one line, recorded and printed)."""

    count: int
    why: str


def _cgroup_quota(root: Path = CGROUP) -> float | None:
    """CPUs the cgroup may use (quota / period), None when unlimited or unreadable."""
    try:  # cgroup v2: "max 100000" (unlimited) or "200000 100000" (2 CPUs)
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def _env_count(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def available(root: Path = CGROUP) -> tuple[int, list[str]]:
    """The CPUs this process may use, and each limit that says so."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limits = [(affinity, f"affinity {affinity}")]
    if (quota := _cgroup_quota(root)) is not None:
        limits.append((max(1, math.ceil(quota)), f"cgroup quota {quota:g}"))
    for name in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        if (count := _env_count(name)) is not None:
            limits.append((count, f"{name}={count}"))
    return min(n for n, _ in limits), [why for _, why in limits]


def choose(setting: int | str, host_share: int = 1, root: Path = CGROUP) -> Threads:
    """`threads=auto` (module docstring) or the number given."""
    if setting != "auto":
        return Threads(int(setting), f"threads={setting}")
    cpus, limits = available(root)
    count = max(1, cpus // max(1, host_share))
    shared = f", shared by {host_share} shards on this host" if host_share > 1 else ""
    return Threads(count, f"threads=auto: {count} ({', '.join(limits)}{shared})")
