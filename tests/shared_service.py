"""What a test run's xdist workers share instead of each paying for it (an MLflow server's start
costs ~7 s of CPU, a reference run seconds): a server started once and a file built once.

    with shared(root, "mlflow", start, stop) as service:   # service: what start(folder) returned
    path = built_once(root, "refs-1a2b.db", build)          # build(path) wrote it, once

`root` is a folder every worker sees (`workers_root`). The first worker to need a server starts it,
each user holds a lease, the last to let go stops it (`stop(service)`, by PID from any worker).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

Service = dict[str, Any]


def workers_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder all of this run's xdist workers see (their base temp folders' parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


@contextlib.contextmanager
def shared(
    root: Path, name: str, start: Callable[[Path], Service], stop: Callable[[Service], None]
) -> Iterator[Service]:
    lock, state = root / f"{name}.lock", root / f"{name}.json"
    with _locked(lock):
        doc = json.loads(state.read_text()) if state.is_file() else None
        if doc is None:
            folder = root / f"{name}-{os.getpid()}-{time.time_ns()}"
            folder.mkdir(parents=True)
            doc = {"service": start(folder), "users": 0}
        doc["users"] += 1
        state.write_text(json.dumps(doc))
    try:
        yield doc["service"]
    finally:
        with _locked(lock):
            doc = json.loads(state.read_text())
            doc["users"] -= 1
            if doc["users"] > 0:
                state.write_text(json.dumps(doc))
            else:
                state.unlink()
                stop(doc["service"])


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its parent (another worker) has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] in ("Z", "X")
    except OSError:
        return True


def end_process(pid: int, grace_s: float = 20) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; returns once it has exited."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while not gone(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + grace_s
        time.sleep(0.05)


def built_once(root: Path, name: str, build: Callable[[Path], None]) -> Path:
    """`root/name`, written by `build(path)` by the first worker that asks (the others wait for it,
    then read it). A build that fails leaves nothing: the next one asking builds it again."""
    final = root / name
    with _locked(root / f"{name}.lock"):
        if not final.exists():
            partial = root / f".{name}.{os.getpid()}"
            try:
                build(partial)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            partial.rename(final)
    return final
