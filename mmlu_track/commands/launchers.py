"""Where a job runs: what the entry point does so that a run launched by Hydra's launchers (joblib,
SLURM through submitit, Ray) behaves as the same command run here.

- **One store, one folder.** A job runs in a process whose working directory is not the launch's:
  a Ray worker in its raylet's folder, any job in its own output folder with `hydra.job.chdir=true`.
  Relative paths in the config (a SQLite store, MLflow's default `mlflow.db`, the cache, a local
  model or dataset folder) are made absolute against the launch directory (`hydra.runtime.cwd`,
  fixed when the driver composed the job) before anything opens them, so every shard of a run
  writes into one store. A sweep's relative output folder is anchored the same way.
- **Errors that cannot succeed on retry** leave a job as an ordinary exception (`JobFailed`, one
  line), not a process exit: Hydra's job runner records it and the driver prints it and exits 2,
  where a process exit made Ray retry the job three times and then report a crash.
- **What the user sees**: a job records its own command (`job_command`: a launcher's worker runs
  submitit's or Ray's), and after a submitit sweep the driver prints each sharded run's results
  (`SweepResults`, a Hydra callback in conf/eval.yaml), which submitit keeps in its job logs.
- **A refused run leaves no folder**: `NewFolders` (a callback in conf/eval.yaml and
  conf/compare.yaml) notes which folders Hydra makes for a run; a refusal before any work
  (`exits.fail(..., refused=True)`) removes them with `discard_unused` if they hold only Hydra's files.
- **Hydra's own files keep no password**: `redact_hydra_files` rewrites the `.hydra/*.yaml` (and a
  sweep's `multirun.yaml`) Hydra saved before the job started, every URL's password masked.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from pathlib import Path
from typing import Any, ClassVar

from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback

from mmlu_track.store.locations import absolute_path, absolute_sqlite, mlflow_uri


def anchored(raw: dict[str, Any], launch_dir: Path) -> dict[str, Any]:
    """The composed config with its relative paths made absolute against the launch directory (an
    MLflow URI given as a relative SQLite file or folder too). An unset MLflow URI stays unset, as
    asked: the environment's or the default is chosen as the command starts (`pipeline.resolve`,
    anchored at the same launch directory)."""
    out = {**raw}
    tracking = {**out.get("tracking", {})}
    if isinstance(tracking.get("db_url"), str):
        tracking["db_url"] = absolute_sqlite(tracking["db_url"], launch_dir)
    if isinstance(tracking.get("mlflow_uri"), str) and tracking["mlflow_uri"]:
        tracking["mlflow_uri"] = mlflow_uri(tracking["mlflow_uri"], launch_dir)
    out["tracking"] = tracking
    if isinstance(out.get("cache_dir"), str):
        out["cache_dir"] = absolute_path(out["cache_dir"], launch_dir)
    data = {**out.get("data", {})}
    if data.get("source") == "local" and isinstance(data.get("path"), str):
        data["path"] = absolute_path(data["path"], launch_dir)
    if isinstance(data.get("annotations"), str) and data["annotations"].strip():  # a hub id stays as given
        data["annotations"] = absolute_path(data["annotations"], launch_dir, only_existing=True)
    out["data"] = data
    model = {**out.get("model", {})}
    for key in ("name_or_path", "tokenizer"):
        if isinstance(model.get(key), str):
            model[key] = absolute_path(model[key], launch_dir, only_existing=True)
    out["model"] = model
    return out


def anchored_dir(folder: str, launch_dir: Path) -> Path:
    """An output folder Hydra may have resolved against a job's own working directory."""
    path = Path(folder).expanduser()
    return path if path.is_absolute() else (launch_dir / path).resolve()


def job_folders(hc: Any) -> tuple[str | None, Path]:
    """The sweep's folder (None outside a sweep) and this job's output folder, Hydra's
    `HydraConfig` given: under the launch folder, wherever the job's process runs."""
    from hydra.types import RunMode

    if hc.mode != RunMode.MULTIRUN:
        return None, Path(hc.runtime.output_dir)
    sweep = anchored_dir(hc.sweep.dir, Path(hc.runtime.cwd))
    return str(sweep), sweep / hc.sweep.subdir


def job_command(hc: Any) -> list[str] | None:
    """The command that runs this sweep job alone (its overrides, the sweep's resolved for it: a
    launcher's worker has its own command line, submitit's `_submit.py`, Ray's worker); None
    outside a sweep, where the process's own command line is the user's."""
    from hydra.types import RunMode

    if hc.mode != RunMode.MULTIRUN:
        return None
    from mmlu_track.commands.compose import as_typed

    return ["python", "-m", "mmlu_track", *as_typed(hc.overrides.hydra), *as_typed(hc.overrides.task)]


def host_share(hc: Any, shards: int) -> int:
    """How many of this launch's jobs run at once on this host: joblib's (its n_jobs, at most the
    run's shards: `threads=auto` divides the CPUs among them); 1 elsewhere (submitit and Ray place
    each job in its own allocation, whose CPUs its affinity and SLURM_CPUS_PER_TASK already say)."""
    from hydra.types import RunMode

    launcher = str(hc.launcher.get("_target_", "")) if hc.mode == RunMode.MULTIRUN else ""
    if "joblib" not in launcher.lower():
        return 1
    n_jobs = int(hc.launcher.get("n_jobs", 1) or 1)
    return max(1, min(n_jobs if n_jobs > 0 else os.cpu_count() or 1, shards))


class JobFailed(CompactHydraException):
    """A sweep job's unusable input (exit 2 when run alone) as an ordinary exception: Hydra records
    the job as failed, the driver prints the message alone (Hydra prints a compact exception as
    its text) and exits 2 (`cli.hydra_exit_codes`), and no engine retries it."""


class SweepResults(Callback):
    """After a sweep, in its driver: the results of each sharded run it finalized (`results.json` in
    the sweep's folder), where a launcher keeps its jobs' output in files of its own (submitit:
    `.submitit/<job>/*_log.out`); other launchers show their jobs' output as it comes."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        """After a submitit sweep, print each sharded run's results table and folder (a results.json
        that cannot be read is skipped); after any other launcher's, nothing."""
        from mmlu_track.pipeline.outputs import RESULTS_FILE
        from mmlu_track.records.protocol import RecordError
        from mmlu_track.records.results import table
        from mmlu_track.records.run import RunRecord

        if "submitit" not in str(config.hydra.launcher.get("_target_", "")):
            return
        sweep = anchored_dir(str(config.hydra.sweep.dir), Path(config.hydra.runtime.cwd))
        for path in sorted([*sweep.glob(RESULTS_FILE), *sweep.glob(f"run-*/{RESULTS_FILE}")]):
            try:
                record = RunRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, RecordError):
                continue
            print(f"run {record.run_id} ({record.start.name}):", table(record.scores), sep="\n")
            print(f"results in {path.parent}")


_NEW: list[Path] = []  # the run's output folder and its parents that did not exist as it started
HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")


class NewFolders(Callback):
    """As a run starts: which of its output folder and that folder's parents do not exist yet, the
    only ones `discard_unused` may remove (a callback in conf/eval.yaml and conf/compare.yaml)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        """Note which of the run's output folder and its parents do not exist yet."""
        folder = Path(os.path.abspath(str(config.hydra.run.dir)))  # as Hydra's run_job makes it
        _NEW[:] = [p for p in (folder, *folder.parents) if not p.exists()]

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        """The run is over: forget the noted folders, so that nothing is removed after it."""
        _NEW.clear()


def discard_unused() -> None:
    """A run refused before any work leaves no output folder: its folder, when Hydra made it for
    this run and it holds only Hydra's own files (`.hydra/`'s YAML files, an empty log), goes, with
    the parents made for it that it leaves empty. Never in a sweep, never a folder that existed."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    new, _NEW[:] = _NEW[:], []
    folder = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.MULTIRUN or new[:1] != [folder]:
        return
    with contextlib.suppress(OSError):  # a folder that holds more, or is gone: what is left stays
        files = _only_hydra_files(folder, hc.output_subdir)
        if files is None:
            return
        for path in files:
            path.unlink()
        for path in [*{p.parent for p in files} - {folder}, *new]:  # .hydra/, the folder, its new parents
            path.rmdir()  # stops at the first that holds something else


def _only_hydra_files(folder: Path, subdir: str | None) -> list[Path] | None:
    """The files Hydra wrote into a run's folder (`subdir`'s YAML files, empty logs); None when the
    folder holds anything else."""
    own = folder / subdir if subdir else None
    found: list[Path] = []
    for path in folder.iterdir():
        if path == own and path.is_dir() and not path.is_symlink():
            found += (inner := list(path.iterdir()))
            if any(p.name not in HYDRA_FILES or p.is_symlink() or not p.is_file() for p in inner):
                return None
        elif path.suffix == ".log" and path.is_file() and not path.is_symlink() and not path.stat().st_size:
            found.append(path)
        else:
            return None
    return found


def redact_hydra_files() -> None:
    """Hydra saved the composed config and the overrides (`.hydra/*.yaml`, a sweep's
    `multirun.yaml`) before the task runs, with any URL's password: rewritten without it."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from mmlu_track.support.credentials import redact_doc, remember_urls

    hc = HydraConfig.get()
    files = list((Path(hc.runtime.output_dir) / hc.output_subdir).glob("*.yaml")) if hc.output_subdir else []
    if hc.mode == RunMode.MULTIRUN:
        files.append(anchored_dir(hc.sweep.dir, Path(hc.runtime.cwd)) / "multirun.yaml")
    texts = {}
    for path in files:
        with contextlib.suppress(OSError):  # not written (a launcher's own layout): nothing to hide
            texts[path] = path.read_text(encoding="utf-8")
    docs = {path: _strings_of(text) for path, text in texts.items()}
    for path, doc in docs.items():
        if doc is None:  # not read so (or empty): as OmegaConf reads it
            docs[path] = OmegaConf.to_container(OmegaConf.create(texts[path]), resolve=False)
    for doc in docs.values():  # every password found by parsing first: masked in all the files
        remember_urls(doc)
    for path, fast in docs.items():
        if redact_doc({"doc": fast})["doc"] == fast:
            continue  # no string of it holds a secret
        # Masked in the values as OmegaConf reads them, then written again: YAML folds a long line
        # at a space, so a password with a space in it is never whole in the file's text.
        doc = OmegaConf.to_container(OmegaConf.create(texts[path]), resolve=False)
        if (clean := redact_doc({"doc": doc})["doc"]) != doc:
            text = OmegaConf.to_yaml(OmegaConf.create(clean))
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # sweep jobs may rewrite one file at once
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)


def _strings_of(text: str) -> Any:
    """A saved YAML file read fast (PyYAML's C parser: OmegaConf's own reading is 25x slower, 0.02 s
    a launch) with every string OmegaConf would read in it: timestamps stay text as in OmegaConf,
    and what OmegaConf reads as a float (1e5) stays text here, a superset. None: not readable so."""
    import yaml

    try:
        return yaml.load(text, Loader=_text_timestamps_loader())
    except yaml.YAMLError:
        return None


@functools.cache
def _text_timestamps_loader() -> type:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # PyYAML built without libyaml: the same, slower

    class Loader(base):  # type: ignore[misc, valid-type]  # untyped upstream
        yaml_implicit_resolvers: ClassVar[dict[str, list[tuple[str, Any]]]] = {
            first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
            for first, resolvers in base.yaml_implicit_resolvers.items()
        }

    return Loader


def sweep_jobs(argv: list[str]) -> tuple[list[list[str]], set[str]] | None:
    """With -m, each job's own overrides (Hydra's `hydra.*` left out) and the keys swept; None
    without -m, or for a sweep Hydra will refuse itself (malformed)."""
    if not {"-m", "--multirun"} & set(argv):
        return None
    # Hydra 1.3 has no public way to expand a sweep into its jobs: its basic sweeper's static
    # `split_arguments` is what `-m` itself runs.
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    # Overrides only: options with values (-cd DIR, --config-name X) are Hydra's, not the job's.
    args = [
        a
        for i, a in enumerate(argv)
        if "=" in a and not a.startswith("-") and not (i > 0 and argv[i - 1].startswith("-c"))
    ]
    try:
        parsed = OverridesParser.create().parse_overrides(args)
        jobs = BasicSweeper.split_arguments(parsed, None)[0]
    except HydraException:
        return None
    swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
    return [[o for o in job if not o.lstrip("+~").startswith("hydra")] for job in jobs], swept
