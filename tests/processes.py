"""Real `python ARGS` processes for the tests of signals, locks and concurrency: each its own cold
interpreter (its PID, signals, locks, open files, exit code), with its stdout and stderr in files
that can be read while it runs. They run the fake model where the model is not the point, so a
process costs its imports (~3 s), not a model's."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


class Popen(subprocess.Popen[str]):
    """`subprocess.Popen([python, *args])`, its output going to files (`output` reads them)."""

    def __init__(self, args: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None):
        folder = Path(tempfile.mkdtemp(prefix="process-"))
        self._out, self._err = folder / "stdout", folder / "stderr"
        with self._out.open("w") as out, self._err.open("w") as err:
            super().__init__(
                [sys.executable, *args], cwd=cwd, env=env, stdout=out, stderr=err,
                stdin=subprocess.DEVNULL, text=True,
            )  # fmt: skip

    def output(self) -> tuple[str, str]:
        """What it has written so far to stdout and stderr."""
        out, err = (f.read_text(encoding="utf-8", errors="replace") for f in (self._out, self._err))
        return out, err

    def communicate(self, input: str | None = None, timeout: float | None = None) -> tuple[str, str]:
        """Its whole output, once it has ended (`input` is refused: its stdin is /dev/null)."""
        if input is not None:
            raise ValueError("these processes read nothing")
        self.wait(timeout)
        return self.output()


def run(args: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`subprocess.run([python, *args], capture_output=True, text=True)`."""
    cmd = [sys.executable, *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
