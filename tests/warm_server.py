"""The warm server (`warm.py`'s client asks it): one process for the whole test run, every xdist
worker's, that imports `warm_preload` once and forks a child for each `python ARGS` asked.

Run as `python -m tests.warm_server SOCKET PID`: it ends with the process PID (the test run's
main process), as multiprocessing's fork server ends with its parent: a run killed outright leaves
no server behind. On SOCKET each connection sends one JSON line
{"args", "cwd", "env", "sys_path", "out", "err"}; the server forks the child, answers
{"pid": ...}, and when the child has ended {"code": ...} (negative: the signal that ended it, as
`subprocess` and `multiprocessing` say it). One thread, one loop over the listening socket and
each child's pidfd: nothing else runs in the process that forks (a thread holding a lock at the
fork would leave it held in every child).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
from typing import Any, NoReturn


def _child(args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> NoReturn:
    """As `python ARGS` would: in `cwd`, with `env`, stdout and stderr to the files, stdin empty."""
    import atexit

    # As a fresh interpreter in a terminal: Ctrl-C raises KeyboardInterrupt (a server started by a
    # non-interactive shell may have inherited SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
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


def _fork(asked: dict[str, Any], own: list[int]) -> int:
    """The child's PID; in the child, `_child` (which never returns)."""
    pid = os.fork()
    if pid:
        return pid
    for fd in own:  # the server's sockets and pidfds are not the child's
        with contextlib.suppress(OSError):
            os.close(fd)
    sys.path[:] = asked["sys_path"]
    _child(asked["args"], asked["cwd"], asked["env"], asked["out"], asked["err"])


def serve(address: str, run_pid: int) -> None:
    """Import the preload, then answer on `address` until SIGTERM or the end of process `run_pid`."""
    import atexit
    from multiprocessing import util

    import tests.warm_preload  # noqa: F401 (what every child starts from)

    # As multiprocessing's fork server: a child starts with none of the server's exit hooks but
    # multiprocessing's own (it ends a pool's workers and runs its finalizers).
    atexit._clear()
    atexit.register(util._exit_function)  # type: ignore[attr-defined]
    # Ctrl-C in the terminal reaches the whole process group: the children stop (`_child` restores
    # KeyboardInterrupt), the server stays for pytest's teardown to stop, as multiprocessing's does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(64)
    loop = selectors.DefaultSelector()
    loop.register(listener, selectors.EVENT_READ)
    run = os.pidfd_open(run_pid)
    loop.register(run, selectors.EVENT_READ)
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, its asker)
    while True:
        for key, _ in loop.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                with conn.makefile("r", encoding="utf-8") as lines:
                    line = lines.readline()
                if not line:  # a probe of whether the server is up (`warm._start`)
                    conn.close()
                    continue
                asked = json.loads(line)
                own = [listener.fileno(), loop.fileno(), run, conn.fileno()]
                own += [*children, *(c.fileno() for _, c in children.values())]
                pid = _fork(asked, own)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, conn)
                loop.register(pidfd, selectors.EVENT_READ)
                _send(conn, {"pid": pid})
            elif key.fd == run:  # the test run is gone: its tests will ask for nothing more
                os._exit(0)
            else:
                pidfd = key.fd
                loop.unregister(pidfd)
                pid, conn = children.pop(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                _send(conn, {"code": os.waitstatus_to_exitcode(status)})
                conn.close()


def _send(conn: socket.socket, doc: dict[str, int]) -> None:
    with contextlib.suppress(OSError):  # the asker is gone (its test ended, its worker died)
        conn.sendall(json.dumps(doc).encode() + b"\n")


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
