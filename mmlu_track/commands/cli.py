"""The entry points: Hydra composes a config, it becomes a typed dataclass here, errors become exit codes.

    python -m mmlu_track ...           (`mmlu-track`)          `main`: one evaluation (or a sweep, -m)
    python -m mmlu_track.compare ...   (`mmlu-track-compare`)  `compare_main`: the release gate

The DictConfig stops in this module: nothing below it imports hydra or omegaconf. Exit codes
(`support/errors.py`): 0 done (or the gate passed), 1 only a gate's regression or inconclusive
verdict, 2 any unusable input (Hydra's own usage errors included), 70 a bug, 130 Ctrl-C. Errors
become exit codes in one place, `errors_as_exit_codes`: an `MmluTrackError` is its one line; any
other exception is a bug, said as one, its traceback saved.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmlu_track.commands.compose import (
    as_typed,
    config_message,
    plain,
    raw_refs,
    register_defaults,
    sub_overrides,
)
from mmlu_track.commands.exits import Unusable, check_writable_cwd, errors_as_exit_codes, fail
from mmlu_track.support.console import redacted_stderr
from mmlu_track.support.errors import EXIT_BUG, EXIT_ERROR, MmluTrackError
from mmlu_track.support.resources import CONF_DIR

if TYPE_CHECKING:
    from mmlu_track.settings.config import EvalConfig


@contextmanager
def hydra_exit_codes(then: str) -> Iterator[None]:
    """Hydra exits 1 on a bad override or config name, the code that means "regression": make it 2.
    Ctrl-C and SIGTERM (which the pipeline turns into exit 143) end with one line saying what
    `then` happens, and the shell's codes 130 and 143."""
    try:
        with _one_line_config_save(), _one_line_composition_errors():
            yield
    except SystemExit as exc:
        if exc.code == 1:
            raise SystemExit(2) from None
        if exc.code == 128 + signal.SIGTERM:
            print(f"mmlu_track: terminated (SIGTERM); {then}", file=sys.stderr)
        raise
    except KeyboardInterrupt:
        print(f"mmlu_track: interrupted; {then}", file=sys.stderr)
        raise SystemExit(130) from None


@contextmanager
def _one_line_config_save() -> Iterator[None]:
    """Hydra writes `.hydra/*.yaml` before our code runs and turns its OSError (a full disk, a
    read-only `hydra.run.dir=`) into a stack trace and exit 1: by then it is too late to say it in
    one line, so its writer is wrapped (a SystemExit passes through Hydra's handler untouched).
    Hydra 1.3 has no hook for it (no option or callback runs before these files are written):
    `hydra.core.utils._save_config` is the one function that writes them."""
    import hydra.core.utils as hydra_utils

    save = hydra_utils._save_config

    def one_line(cfg: Any, filename: str, output_dir: Path) -> None:
        try:
            save(cfg, filename, output_dir)
        except OSError as err:
            fail(
                f"cannot write Hydra's {filename} into {output_dir}: {err.strerror or err}; free space "
                "there, or set hydra.run.dir=DIR to a writable folder with room"
            )

    hydra_utils._save_config = one_line
    try:
        yield
    finally:
        hydra_utils._save_config = save


@contextmanager
def _one_line_composition_errors() -> Iterator[None]:
    """Hydra reports its refusal of an override (an unknown key or option, a value that does not
    parse) in five to eight lines with a hint about HYDRA_FULL_ERROR: said here in one line. Its
    other reports (a sweep job's `JobFailed`, a launcher's) and HYDRA_FULL_ERROR=1 are left alone.
    Hydra 1.3 has no API for how `@hydra.main` reports an error: its `run_and_report` (in
    `hydra._internal.utils`) is the one place every composition error passes through."""
    import hydra._internal.utils as hydra_utils
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    report = hydra_utils.run_and_report

    def compact(func: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            try:
                return func()
            except (ConfigCompositionException, MissingConfigException, OverrideParseException) as err:
                fail(_hydra_line(err))

        return run

    def one_line(func: Callable[[], Any]) -> Any:
        return report(func if os.environ.get("HYDRA_FULL_ERROR") == "1" else compact(func))

    hydra_utils.run_and_report = one_line
    try:
        yield
    finally:
        hydra_utils.run_and_report = report


def _hydra_line(err: Exception) -> str:
    """Hydra's refusal of an override in one line: its first line, the OmegaConf error under it,
    and its hint (`To append to your config use +key=value`; the options of a config group)."""
    from hydra.errors import OverrideParseException

    first, *rest = [line.strip() for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
    if isinstance(err, OverrideParseException):
        return f"cannot parse the override {err.override!r}: {first}"
    rest = rest[: rest.index("Config search path:")] if "Config search path:" in rest else rest
    cause = err.__cause__
    if (unknown := _unknown_key(cause)) is not None:
        return unknown
    said = [first, *([config_message(cause)] if isinstance(cause, Exception) else [])]
    if rest:
        hint = f"{rest[0][:1].lower()}{rest[0][1:]}"
        said.append(f"({hint} {', '.join(rest[1:])})" if rest[1:] else f"({hint})")
    return " ".join(said)


def _unknown_key(cause: BaseException | None) -> str | None:
    """A key the config does not have, said with the keys it may have meant (never Hydra's hint to
    append it with `+`, which would only move the typo into the run's config)."""
    import difflib

    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if not isinstance(cause, ConfigAttributeError | ConfigKeyError):
        return None
    parent, full = getattr(cause, "parent_node", None), getattr(cause, "full_key", None)
    if not isinstance(parent, DictConfig) or not full:
        return None
    root = OmegaConf.to_container(parent._get_root(), resolve=False)

    def dotted(node: object, prefix: str = "") -> list[str]:
        if not isinstance(node, dict):
            return [prefix[:-1]]
        return [k for key, v in node.items() if key != "hydra" for k in dotted(v, f"{prefix}{key}.")]

    keys = dotted(root)
    close = difflib.get_close_matches(full, keys, n=3, cutoff=0.75)
    if "." not in full:  # a group's key typed without its group: `margin` for gate.margin
        last = {k.rpartition(".")[2]: k for k in keys}
        close += [last[k] for k in difflib.get_close_matches(full, list(last), n=3, cutoff=0.75)]
    guess = list(dict.fromkeys(close))[:3]
    meant = f": did you mean {' or '.join(guess)}?" if guess else ""
    return f"unknown key {full!r}{meant} (--help lists every key)"


def validate_sweep(argv: list[str], config_name: str, check: Callable[[dict[str, Any]], object]) -> None:
    """With -m, compose and check every job's config before the first job starts (Hydra's own
    sweepers stop a sweep at its first bad job, after the jobs before it have run)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from mmlu_track.commands.launchers import sweep_jobs
    from mmlu_track.settings.typed import ConfigError

    if not (sweep := sweep_jobs(argv)):
        return
    jobs, swept_keys = sweep
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for number, own in enumerate(jobs, 1):
            try:
                check(plain(compose(config_name=config_name, overrides=own)))
            except (ConfigError, OmegaConfBaseException, HydraException) as err:
                swept = " ".join(o for o in own if o.split("=", 1)[0] in swept_keys)
                said = _hydra_line(err) if isinstance(err, HydraException) else config_message(err)
                fail(f"sweep job {number} of {len(jobs)} ({swept}): {said}; no job was run")


def _eval_config(cfg: Any) -> EvalConfig:
    """The job's composed config as the typed settings (a `gate.baseline=` run id kept as typed),
    its relative paths anchored at the launch directory (`launchers.anchored`)."""
    from hydra.core.hydra_config import HydraConfig

    from mmlu_track.commands.launchers import anchored
    from mmlu_track.settings.checks import eval_config_from_dict
    from mmlu_track.support.credentials import remember_overrides

    remember_overrides(as_typed(HydraConfig.get().overrides.task))  # a launched job's own
    with errors_as_exit_codes(refused=True):
        raw = plain(cfg)
        if isinstance(raw.get("gate"), dict):
            overrides = as_typed(HydraConfig.get().overrides.task)
            raw["gate"] = raw_refs(raw["gate"], sub_overrides(overrides, "gate"))
        return eval_config_from_dict(anchored(raw, Path(HydraConfig.get().runtime.cwd)))


def main() -> None:
    """`python -m mmlu_track` (`mmlu-track`): one evaluation, or a sweep with -m. Exits 0 done, 1 a
    sequential gate's regression or inconclusive verdict, 2 unusable input (one line), 70 a bug."""
    if not (CONF_DIR / "eval.yaml").is_file():
        fail(f"config folder {CONF_DIR} is missing: reinstall mmlu_track (its wheel ships conf/)")
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import DictConfig

    from mmlu_track.settings.checks import eval_config_from_dict

    @hydra.main(config_path=str(CONF_DIR), config_name="eval", version_base="1.3")
    def app(cfg: DictConfig) -> float | None:
        from mmlu_track.commands.launchers import JobFailed

        try:
            return _eval_job(cfg, codes)
        except Unusable as exc:  # in a sweep, a process exit would make Ray retry a job that cannot succeed
            if HydraConfig.get().mode != RunMode.MULTIRUN:
                raise
            codes.append(int(exc.code or EXIT_ERROR))  # a bug's 70 outlives Hydra's failed-job exit
            raise JobFailed(f"mmlu_track: error: sweep job {HydraConfig.get().job.num}: {exc.line}") from None

    codes: list[int] = []
    check_writable_cwd(sys.argv[1:])
    validate_sweep(sys.argv[1:], "eval", eval_config_from_dict)
    try:
        with hydra_exit_codes("run the same command to resume"), redacted_stderr():
            app()
    except SystemExit as exc:
        if exc.code == EXIT_ERROR and EXIT_BUG in codes:  # a sweep with a job that hit a bug
            raise SystemExit(EXIT_BUG) from None
        raise
    # The sequential gate's verdict leaves only here (exit 1 from inside Hydra is a usage error).
    if codes:
        sys.exit(max(codes))
    show_resolved(sys.argv[1:])


_SHOWN = ("job", "all")  # `--cfg job|all`: Hydra printed the job's config, and ran nothing


def show_resolved(argv: list[str]) -> None:
    """After Hydra's `--cfg job` (or `all`), what the run would choose from those settings as it
    starts (`settings.resolved`), as YAML comments: the config above stays as asked."""
    from hydra import compose, initialize_config_dir
    from omegaconf.errors import OmegaConfBaseException

    from mmlu_track.pipeline.resolve import resolve
    from mmlu_track.settings.checks import eval_config_from_dict

    flags = [(a, b) for a, b in zip(argv, [*argv[1:], ""], strict=True) if a in ("--cfg", "-c")]
    asked = [b for _, b in flags] + [a.split("=", 1)[1] for a in argv if a.startswith("--cfg=")]
    if not any(a in _SHOWN for a in asked) or "-m" in argv or "--multirun" in argv:
        return
    skip = {b for _, b in flags} | {a for a, _ in flags}
    overrides = [a for a in argv if a not in skip and not a.startswith("-")]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = eval_config_from_dict(plain(compose(config_name="eval", overrides=overrides)))
    except (MmluTrackError, OmegaConfBaseException) as err:  # the config shown holds a bad value
        fail(config_message(err))  # no run, no folder: nothing to discard (Hydra made none for --cfg)
    print("\n".join(resolve(cfg).lines()))


def _eval_job(cfg: Any, codes: list[int]) -> float | None:
    """One evaluation (a sweep's job): its micro accuracy; a sequential gate's exit code into `codes`."""
    from hydra.core.hydra_config import HydraConfig

    from mmlu_track.commands.launchers import host_share, job_command, job_folders, redact_hydra_files
    from mmlu_track.pipeline.evaluate import Origin
    from mmlu_track.pipeline.resolve import resolve

    try:
        eval_cfg = _eval_config(cfg)
    finally:  # after the check: a key it refused, unshown, is masked in Hydra's files too
        redact_hydra_files()
    # Jobs of one sweep share a tag in MLflow and a column in the SQL store.
    hydra_cfg = HydraConfig.get()
    sweep, output_dir = job_folders(hydra_cfg)
    share = host_share(hydra_cfg, eval_cfg.shards)
    with errors_as_exit_codes():
        # What the settings leave to the surroundings is chosen once, here; the config stays as asked.
        chosen = resolve(eval_cfg, share, Path(hydra_cfg.runtime.cwd))
        origin = Origin(sweep, job_command(hydra_cfg), host_share=share, resolved=chosen)
    with _discarded_if_interrupted_before_any_work():
        return _evaluate(eval_cfg, output_dir, origin, codes)


@contextmanager
def _discarded_if_interrupted_before_any_work() -> Iterator[None]:
    """Ctrl-C before anything was recorded (while the model loads) leaves no output folder."""
    try:
        yield
    except KeyboardInterrupt as err:
        if getattr(err, "before_any_work", False):
            from mmlu_track.commands.launchers import discard_unused

            discard_unused()
        raise


def _evaluate(eval_cfg: Any, output_dir: Path, origin: Any, codes: list[int]) -> float | None:
    """The evaluation of one job, gated or not (`_eval_job`)."""
    from mmlu_track.pipeline.evaluate import run

    gated = eval_cfg.gate is not None and eval_cfg.gate.sequential
    with errors_as_exit_codes():
        if gated:
            from mmlu_track.eval.plan import question_docs
            from mmlu_track.gate.sequential_run import sequential_gate

            # the gate observes the evaluation's committed looks, then gives its verdict
            with sequential_gate(eval_cfg, docs_for=question_docs) as gate:
                out = run(eval_cfg, output_dir, looks=gate, origin=origin)
                codes.append(gate.conclude(out.run_id, output_dir))
        else:
            out = run(eval_cfg, output_dir, origin=origin)
    if out.reused:  # nothing written: the folder Hydra made for this run goes (a sweep's stays)
        from mmlu_track.commands.launchers import discard_unused

        discard_unused()
    return out.scores.micro.acc if out.scores and not gated else None


def compare_main() -> None:
    """`python -m mmlu_track.compare`: exit 0 pass, 1 regression or inconclusive, 2 bad input, 70 a bug."""
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig

    from mmlu_track.commands.launchers import redact_hydra_files
    from mmlu_track.eval.plan import question_docs
    from mmlu_track.gate.run import execute
    from mmlu_track.settings.checks import compare_config_from_dict
    from mmlu_track.support.errors import EXIT_PASS

    codes: list[int] = []

    @hydra.main(config_path=str(CONF_DIR), config_name="compare", version_base="1.3")
    def app(cfg: DictConfig) -> None:
        redact_hydra_files()
        with errors_as_exit_codes(refused=True):  # its reports, when written, keep the folder
            raw = raw_refs(plain(cfg), as_typed(HydraConfig.get().overrides.task))
            compare_cfg = compare_config_from_dict(raw)
            out = Path(HydraConfig.get().runtime.output_dir)
            codes.append(execute(compare_cfg, out, docs_for=question_docs))

    check_writable_cwd(sys.argv[1:])
    with hydra_exit_codes("no verdict"), redacted_stderr():
        app()
    # The verdict's code leaves only here: any exit 1 from inside Hydra is a usage error, not a verdict.
    sys.exit(max(codes, default=EXIT_PASS))


def noise_main() -> None:
    """`python -m mmlu_track.noise`: exit 0 with the measurement, 2 with one line, 70 a bug."""
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf, open_dict

    from mmlu_track.commands.launchers import redact_hydra_files
    from mmlu_track.commands.noise import measure
    from mmlu_track.settings.checks import check_noise
    from mmlu_track.settings.config import NoiseConfig
    from mmlu_track.settings.typed import from_mapping

    @hydra.main(config_path=str(CONF_DIR), config_name="noise", version_base="1.3")
    def app(cfg: DictConfig) -> None:
        redact_hydra_files()
        with errors_as_exit_codes(refused=True):  # an interpolation that fails: one line, as any refusal
            with open_dict(cfg):
                raw = OmegaConf.to_container(cfg.pop("noise"), resolve=True)
            noise = from_mapping(NoiseConfig, raw, prefix="noise.")  # type: ignore[arg-type]
            check_noise(noise)
        eval_cfg = _eval_config(cfg)
        with errors_as_exit_codes():
            measure(eval_cfg, noise, Path(HydraConfig.get().runtime.output_dir))

    check_writable_cwd(sys.argv[1:])
    with hydra_exit_codes("run the same command to resume"), redacted_stderr():
        app()


# At import: Hydra's launchers (joblib, Ray, submitit) compose each job's config again in their own
# worker processes, which import this module (the task function's) before they compose.
register_defaults()
