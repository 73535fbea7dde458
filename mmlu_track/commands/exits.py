"""Where an exception becomes an exit code and its one line, for every command.

0 done (or the gate passed), 1 only a gate's regression or inconclusive verdict, 2 unusable input
(`fail`: an `MmluTrackError`, OmegaConf's own config errors, a refused working directory), 70 a bug
(`bug`: any other exception, said as one, its traceback saved with secrets masked). A sweep's job
raises its line as `Unusable`, which the launcher's driver passes on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NoReturn

from mmlu_track.commands.compose import config_message
from mmlu_track.support.errors import EXIT_BUG, EXIT_ERROR, MmluTrackError


class Unusable(SystemExit):
    """Exit 2 (or a bug's 70) with its one line (`fail`): a sweep's job passes the line on to the driver."""

    def __init__(self, line: str, code: int = EXIT_ERROR) -> None:
        """`line`: the one line `fail` printed, kept for a sweep's driver; `code`: the exit status (2, or
        a bug's 70)."""
        super().__init__(code)
        self.line = line


def fail(message: str, *, refused: bool = False, code: int = EXIT_ERROR) -> NoReturn:
    """Print `message` on stderr as one line (`mmlu_track: error: ...`, secrets masked) and exit with
    `code` (2 unless given) by raising `Unusable`. `refused`: before any work, so a run's output folder
    that holds only Hydra's files is removed (`launchers.discard_unused`)."""
    from mmlu_track.support.credentials import redact_text

    # Masked here too: the last place any message passes before it leaves the process.
    one_line = redact_text(" ".join(part.strip() for part in message.splitlines() if part.strip()))
    print(f"mmlu_track: error: {one_line}", file=sys.stderr)
    if refused:  # before any work, in a run: it leaves no output folder
        from mmlu_track.commands.launchers import discard_unused

        discard_unused()
    raise Unusable(one_line, code)


def bug(err: Exception) -> NoReturn:
    """An exception no check foresaw is a bug, never the user's typo: its traceback (secrets masked)
    is saved, and one line says so and where (exit 70, `EXIT_BUG`)."""
    import tempfile
    import time
    import traceback

    from mmlu_track.support.credentials import redact_text

    folder = Path(tempfile.gettempdir())
    with suppress(Exception):  # inside a Hydra job: beside its other files
        from hydra.core.hydra_config import HydraConfig

        folder = Path(HydraConfig.get().runtime.output_dir)
    saved = folder / f"mmlu_track-bug-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    try:
        saved.write_text(redact_text("".join(traceback.format_exception(err))), encoding="utf-8")
        where = f"its traceback is in {saved}"
    except OSError as write_err:
        where = f"its traceback could not be saved ({write_err.strerror or write_err})"
    first = (str(err).splitlines() or [""])[0]
    fail(
        f"internal error (a bug in mmlu_track, not your input): {type(err).__name__}: {first}; {where}",
        code=EXIT_BUG,
    )


@contextmanager
def errors_as_exit_codes(*, refused: bool = False) -> Iterator[None]:
    """The one place an exception becomes an exit code: an `MmluTrackError` (or OmegaConf's own
    config error) exits with its one line (`refused`, or raised before any work: no output folder
    is left); any other exception is a bug (`bug`). Exits (SystemExit) and Ctrl-C pass through."""
    from omegaconf.errors import OmegaConfBaseException

    from mmlu_track.settings.typed import ConfigError

    try:
        yield
    except MmluTrackError as err:  # a ConfigError's line names its full key (`config_message`)
        said = config_message(err) if isinstance(err, ConfigError) else str(err)
        fail(said, refused=refused or err.before_any_work, code=err.exit_code)
    except OmegaConfBaseException as err:
        fail(config_message(err), refused=True)
    except Exception as err:
        bug(err)


def check_writable_cwd(argv: list[str]) -> None:
    """Hydra creates the output folder before any of our code runs, and its failure is a stack
    trace: refuse a read-only working directory, or an unwritable `hydra.run.dir=` /
    `hydra.sweep.dir=`, up front, in one line."""
    given = [a.split("=", 1) for a in argv if a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))]
    for key, value in given:
        folder = Path(value.strip("'\"")).expanduser().absolute()
        existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
        if not os.access(existing, os.W_OK):
            fail(f"{key}={folder} cannot be created: {existing} is not writable; choose a writable folder")
        _try_making(key, folder, existing)
    if given:
        return
    cwd = os.getcwd()
    if not os.access(cwd, os.W_OK):
        fail(
            f"the working directory {cwd} is not writable (outputs/ and the default results database go "
            "there): run from a writable folder, or set hydra.run.dir=DIR and tracking.db_url=URL"
        )


def _try_making(key: str, folder: Path, existing: Path) -> None:
    """Make the folders Hydra will make, and take them away again: a place where permissions say
    yes and the filesystem says no (`/proc`, a full or read-only mount) is refused in one line,
    not in Hydra's chained tracebacks."""
    made = [p for p in (folder, *folder.parents) if p != existing and existing in p.parents]
    for attempt in range(5):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            break
        except OSError as err:
            # Not found: another process (a sibling shard) may have taken away a parent it had
            # made between our mkdirs; tried again, then said as any other refusal (`/proc`).
            if isinstance(err, FileNotFoundError) and attempt < 4:
                continue
            fail(f"{key}={folder} cannot be created: {err.strerror or err}; choose a writable folder")
    for path in made:  # deepest first: Hydra makes them again, as it always does
        with suppress(OSError):
            path.rmdir()
