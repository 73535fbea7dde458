"""Real processes started warm: forked from a server process that has already imported torch,
transformers, MLflow, Hydra and mmlu_track, so a test pays for what the process does, not for the
~10 s of imports a cold interpreter spends first.

Each is a real OS process (its own PID, signals, locks, open files, exit code): what the tests of
signals, locks and concurrency need. Use `subprocess` instead where a cold interpreter is the point
(the installed wheel, what an import pulls in) or where another program starts it.
`Popen(["-m", "mmlu_track", ...])` and `Popen(["-c", code])` mean what `python ARGS` means; the
process's stdout and stderr go to files, read back by `communicate`. One server per test process
(and so per xdist worker), started on first use. `python_on_path` gives a program that calls
`python -m …` itself (a workflow's `run:` step) a `python` that runs warm.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import runpy
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

PRELOAD = ["tests.warm_preload"]

_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(PRELOAD)


def _child(args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """As `python ARGS` would: in `cwd`, with `env`, stdout and stderr to the files."""
    import atexit

    # As a fresh interpreter in a terminal: Ctrl-C raises KeyboardInterrupt (a server started by a
    # non-interactive shell may have inherited SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
    code: int | str | None = 0
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            raise ValueError(f"warm.Popen runs `-m MODULE ...` or `-c CODE`, not {args!r}")
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    # As an interpreter's exit: threads joined and their exit hooks run (a process pool shuts its
    # workers down there), then atexit's (the fork cleared the server's).
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    os._exit(code or 0)


class Popen:
    """The part of `subprocess.Popen` the tests use, for a warm `python ARGS` process."""

    def __init__(self, args: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None):
        folder = tempfile.mkdtemp(prefix="warm-")
        self._out, self._err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        for path in (self._out, self._err):
            Path(path).touch()
        self._proc = _CTX.Process(
            target=_child,
            args=(
                list(args),
                str(cwd or os.getcwd()),
                dict(os.environ if env is None else env),
                self._out,
                self._err,
            ),
        )
        self._proc.start()
        self.pid: int = self._proc.pid or 0
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._proc.is_alive():
            self._proc.join()
            self.returncode = self._proc.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self.poll() is None:
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
