"""Real processes started warm: forked from a server process that has already imported torch,
transformers, MLflow, Hydra and mmlu_track, so a test pays for what the process does, not for the
~10 s of imports a cold interpreter spends first.

Each is a real OS process (its own PID, signals, locks, open files, exit code): what the tests of
signals, locks and concurrency need. Use `subprocess` instead where a cold interpreter is the point
(the installed wheel, what an import pulls in) or where another program starts it.
`Popen(["-m", "mmlu_track", ...])` and `Popen(["-c", code])` mean what `python ARGS` means; the
process's stdout and stderr go to files, read back by `communicate`. One server (`warm_server.py`)
for the whole test run, started by the first worker that asks and stopped by the last to let go
(`use_shared_root`, `release`: the conftest's); without a shared root, one per process.
`python_on_path` gives a program that calls `python -m …` itself (a workflow's `run:` step) a
`python` that runs warm.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_SERVER: dict[str, Any] = {}  # the server's {"sock", "pid"} while this process holds a lease
_LEASE = contextlib.ExitStack()
_SHARED: dict[str, Any] = {}  # "root": where the workers meet, "env": the server's (`use_shared_root`)
_STARTING = threading.Lock()  # `python_on_path` asks from its server's threads


def use_shared_root(root: Path, env: dict[str, str]) -> None:
    """Share the server with every process given `root` (each xdist worker gets the same); it starts
    with `env` (the session's, not that of the test that happens to ask first: what the preload
    reads as it imports stays the same whichever test that is)."""
    _SHARED.update(root=root, env=env)


def release() -> None:
    """Let go of the server: stopped if this process was the last to use it."""
    _LEASE.close()
    _SERVER.clear()


def _start(folder: Path) -> dict[str, Any]:
    """`python -m tests.warm_server` in `folder`: {"sock", "pid"} once it accepts (its preload done)."""
    from .conftest import ROOT
    from .serve import _STARTED

    sock = str(folder / "sock")
    with (folder / "server.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.warm_server", sock, str(_run_pid())],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=_SHARED.get("env", os.environ),
        )  # fmt: skip
    _STARTED[proc.pid] = proc
    deadline = time.monotonic() + 300
    while True:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(sock)
                return {"sock": sock, "pid": proc.pid}
            except OSError:
                pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            said = (folder / "server.log").read_text()[-3000:]
            raise RuntimeError(f"the warm server did not start: {said}")
        time.sleep(0.1)


def _run_pid() -> int:
    """The test run's main process: an xdist worker's parent, else this process."""
    return os.getppid() if "PYTEST_XDIST_WORKER" in os.environ else os.getpid()


def _server() -> str:
    """The server's socket, leased (and started, by the first to ask) on first use."""
    with _STARTING:
        if not _SERVER:
            from .serve import stop_started
            from .shared_service import shared

            root = _SHARED.get("root") or Path(tempfile.mkdtemp(prefix="warm-root-"))
            _SERVER.update(_LEASE.enter_context(shared(root, "warm-server", _start, stop_started)))
        return str(_SERVER["sock"])


class Popen:
    """The part of `subprocess.Popen` the tests use, for a warm `python ARGS` process."""

    def __init__(self, args: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None):
        if not args or args[0] not in ("-m", "-c"):
            raise ValueError(f"warm.Popen runs `-m MODULE ...` or `-c CODE`, not {args!r}")
        folder = tempfile.mkdtemp(prefix="warm-")
        self._out, self._err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        for path in (self._out, self._err):
            Path(path).touch()
        env = dict(os.environ if env is None else env)
        asked = {"args": list(args), "cwd": str(cwd or os.getcwd()), "env": env, "sys_path": sys.path,
                 "out": self._out, "err": self._err}  # fmt: skip
        self._conn = socket.socket(socket.AF_UNIX)
        self._conn.connect(_server())
        self._conn.sendall(json.dumps(asked).encode() + b"\n")
        self._answers = self._conn.makefile("r", encoding="utf-8")
        self.pid: int = json.loads(self._answers.readline())["pid"]
        self.returncode: int | None = None

    def _ended(self, timeout: float | None) -> bool:
        """Whether the server has said the exit code within `timeout` s (None: however long)."""
        if self.returncode is not None:
            return True
        ready = select.poll()  # not select.select: a worker's descriptors may number past 1024
        ready.register(self._conn, select.POLLIN)
        if ready.poll(None if timeout is None else timeout * 1000):
            self.returncode = int(json.loads(self._answers.readline())["code"])
            self._answers.close()
            self._conn.close()
        return self.returncode is not None

    def poll(self) -> int | None:
        self._ended(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise TimeoutError(f"warm process {self.pid} still running after {timeout} s")
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output()

    def output(self) -> tuple[str, str]:
        """What it has written so far to stdout and stderr."""
        return tuple(Path(p).read_text(encoding="utf-8", errors="replace") for p in (self._out, self._err))  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def started(proc: Popen, text: str, timeout: float = 120) -> None:
    """Wait until the process has printed `text` (stdout or stderr)."""
    deadline = time.monotonic() + timeout
    while text not in "".join(proc.output()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never came: {proc.output()}")
        time.sleep(0.05)


def run(args: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`subprocess.run([python, *args], capture_output=True, text=True)`, warm."""
    proc = Popen(args, cwd=cwd, env=env)
    out, err = proc.communicate(timeout)
    return subprocess.CompletedProcess(args, proc.wait(), out, err)


# A `python` for programs the tests start that start `python` themselves (a workflow's `run:` step):
# `python -m MODULE ...` and `python -c CODE ...` run warm, through a socket this process serves;
# anything else is the real interpreter. Its output comes back when it ends.
_SHIM = """#!{python} -SE
import json, os, shutil, signal, socket, sys
args = sys.argv[1:]
if not args or args[0] not in ("-m", "-c"):
    os.execv({python!r}, [{python!r}, *args])
asked = socket.socket(socket.AF_UNIX)
asked.connect({sock!r})
asked.sendall(json.dumps({{"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode() + b"\\n")
answers = asked.makefile("r")
pid = json.loads(answers.readline())["pid"]
def forward(n, _):
    try:
        os.kill(pid, n)
    except ProcessLookupError:  # it has just ended: its code comes next
        pass
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, forward)
done = json.loads(answers.readline())
for path, stream in ((done["out"], sys.stdout), (done["err"], sys.stderr)):
    with open(path, "rb") as written:
        shutil.copyfileobj(written, stream.buffer)
    stream.flush()
code = done["code"]
sys.exit(128 - code if code < 0 else code)
"""


class _Serve(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        asked = json.loads(self.rfile.readline())
        proc = Popen(asked["args"], cwd=asked["cwd"], env=asked["env"])
        self.wfile.write(json.dumps({"pid": proc.pid}).encode() + b"\n")
        code = proc.wait()
        self.wfile.write(json.dumps({"code": code, "out": proc._out, "err": proc._err}).encode() + b"\n")


@contextlib.contextmanager
def python_on_path(path: str) -> Iterator[str]:
    """`path` (a PATH) with a `python` first that runs `-m`/`-c` warm while this lasts."""
    folder = Path(tempfile.mkdtemp(prefix="warm-"))
    sock = str(folder / "sock")
    server = socketserver.ThreadingUnixStreamServer(sock, _Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    shim = folder / "bin" / "python"
    shim.parent.mkdir()
    shim.write_text(_SHIM.format(python=sys.executable, sock=sock))
    shim.chmod(0o755)
    try:
        yield f"{shim.parent}{os.pathsep}{path}"
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(folder, ignore_errors=True)
