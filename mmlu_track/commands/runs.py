"""`python -m mmlu_track.runs`: list, show and sync the runs in the SQL store.

python -m mmlu_track.runs list                # newest first, with MLflow run ids
python -m mmlu_track.runs show RUN            # one run: settings and per-subject scores
python -m mmlu_track.runs sync                # log finished runs that MLflow missed
python -m mmlu_track.runs import PATH         # lm-eval's --log_samples output, stored as runs
python -m mmlu_track.runs noise               # the noise measurements (python -m mmlu_track.noise)
python -m mmlu_track.runs --db URL db-upgrade # migrate a shared server database (explicitly, once)

Exit codes: 0 done, 2 unusable input or a run that could not be synced (one line on stderr), 70 a bug.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from mmlu_track.commands import import_runs
from mmlu_track.records.protocol import RecordError
from mmlu_track.records.run import RunRole
from mmlu_track.records.stored import RunStatus, ambiguous
from mmlu_track.settings.config import DEFAULT_ALPHA, SEEDED_SOURCES, TrackingConfig, env_default
from mmlu_track.store.db import parse_url
from mmlu_track.support.console import reader_gone
from mmlu_track.support.credentials import redact, redact_text, remember_urls
from mmlu_track.support.errors import EXIT_ERROR, MmluTrackError

if TYPE_CHECKING:
    from mmlu_track.records.stored import StoredRun
    from mmlu_track.store.sql import SqlStore

_ROW = "{:<12} {:<9} {:<5} {:<28} {:<14} {:<16} {:<21} {:>2} {:<8} {:>5} {:>6} {:>7} {:>7} {:>10}  {:<19}  {}"
NOISE_NOTE = (
    "role noise: a run the noise command made (a repeat, another batching, other shots): a model name "
    "never resolves to it in compare unless noise_runs=true; runs list --no-noise hides them"
)
CIRCULAR_NOTE = (
    "circular runs (scoring …/circular): micro % and macro % are circular accuracy (right in every "
    "rotation of the choices); as given %: the micro accuracy with the choices as published"
)


def _prompt(run: StoredRun) -> str:
    """The formulation (after `mmlu_pro:` for an MMLU-Pro run), and the chat style where the prompts
    went through the model's template."""
    chat, bench = run.protocol.chat, run.protocol.benchmark
    name = run.formulation if bench == "mmlu" else f"{bench}:{run.formulation}"
    return name if chat == "none" else f"{name}/{chat}"


class _Facts(NamedTuple):
    """What tells two runs of one model apart beyond the other columns."""

    version: str  # the weights' revision (hub) or hash (files), a random model's seed
    scoring: str  # the method (`cot`: a chain of thought), `/circular` where every rotation was asked
    dtype: str  # as loaded
    limit: str  # questions per subject, or all


def _section(cfg: object, name: str) -> dict[str, object] | None:
    """A settings group of a stored config (`{}` where absent), None where it is not a mapping."""
    if not isinstance(cfg, dict):
        return None
    section = cfg.get(name, {})
    return section if isinstance(section, dict) else None


def _facts(run: StoredRun) -> _Facts:
    """From the columns and the settings' few keys: a listing parses no record (5 ms a run)."""
    unreadable = _Facts("?", run.scoring, "?", "?")  # recorded by an incompatible version: listed, not fatal
    try:
        cfg = json.loads(run.config_json)
        dtype = run.model_dtype or (record.start.model.dtype if (record := run.record) else run.config.dtype)
    except (RecordError, ValueError):
        return unreadable
    model, scoring = _section(cfg, "model"), _section(cfg, "scoring")
    if not isinstance(cfg, dict) or model is None or scoring is None:
        return unreadable
    limit = cfg.get("limit")
    seeded = f"seed={model.get('tiny_seed')}" if model.get("source") in SEEDED_SOURCES else "-"
    version = run.model_revision or seeded
    circular = "/circular" if scoring.get("choice_order") == "circular" else ""
    method = "cot" if scoring.get("extract") == "cascade" else run.scoring  # a chain of thought
    return _Facts(version, f"{method}{circular}", dtype, "all" if limit is None else str(limit))


def _pct(x: float | None) -> str:
    return f"{100 * x:.2f}" if x is not None else "-"


def _accuracies(run: StoredRun, circular: bool) -> tuple[str, str, str]:
    """Micro %, macro % and as given %: a circular run's headline is its circular accuracy, its
    accuracy as given beside it; any other run's is its accuracy, nothing beside."""
    try:
        scores = run.record.circular if circular and run.record else None
    except RecordError:
        scores = None  # recorded by an incompatible version: listed as its columns say
    if scores is None:
        return _pct(run.acc_micro), _pct(run.acc_macro), "-"
    return _pct(scores.accuracy.micro.acc), _pct(scores.accuracy.macro.acc), _pct(run.acc_micro)


def _list(store: SqlStore, args: argparse.Namespace) -> int:
    runs = store.runs(limit=args.limit, noise=not args.no_noise)
    if not runs:
        hidden = " (--no-noise hides the rest)" if args.no_noise and store.runs(limit=1) else ""
        print(f"no {'evaluations' if hidden else 'runs'} in {store.url}{hidden}")
        return 0
    print(
        _ROW.format(
            "run",
            "status",
            "role",  # noise: made by the noise command, never what a model name resolves to
            "model",
            "version",
            "scoring",
            "prompt",
            "k",
            "dtype",
            "limit",
            "n",
            "micro %",  # percent, as the run's own summary and the gate's report say it
            "macro %",
            "as given %",  # a circular run's: its headline is circular accuracy
            "created (UTC)",
            "mlflow",
        )
    )
    circular = False
    for r in runs:
        created = f"{r.created_at:%Y-%m-%d %H:%M:%S}"
        facts = _facts(r)
        accuracies = _accuracies(r, facts.scoring.endswith("/circular"))
        circular |= accuracies[2] != "-"
        cells = (
            r.id[:12],
            "dead" if store.dead(r) else r.status,
            "noise" if r.role == RunRole.NOISE else "-",
            r.model_name[:28],
            facts.version[:14],
            facts.scoring,
            _prompt(r),
            r.k,
            facts.dtype,
            facts.limit,
            r.n_questions,
        )
        print(_ROW.format(*cells, *accuracies, created, r.mlflow_run_id or "-"))
    if circular:
        print(CIRCULAR_NOTE)
    if any(r.role == RunRole.NOISE for r in runs):
        print(NOISE_NOTE)
    if measured := store.noise.entries(1000):
        references = {e.reference_run_id[:12] for e in measured}
        print(
            f"{len(measured)} noise measurement{'s' * (len(measured) > 1)} (reference runs "
            f"{', '.join(sorted(references)[:5])}{' …' * (len(references) > 5)}): "
            "python -m mmlu_track.runs noise"
        )
    return 0


def _show(store: SqlStore, args: argparse.Namespace) -> int:
    found = store.find(args.run)
    if len(found) > 1:  # a short prefix: which runs it could mean, as the compare command says
        print(f"mmlu_track: error: {ambiguous(args.run, found)}", file=sys.stderr)
        return 2
    if not found:
        print(f"mmlu_track: error: no run {args.run!r} in {store.url}", file=sys.stderr)
        return 2
    run = found[0]
    status = (
        f"dead ({why}; it was {run.status}): rerun its command to resume"
        if (why := store.dead(run))
        else run.status
    )
    role = (
        "  role noise (made by the noise command: not a version of the model)"
        if run.role == RunRole.NOISE
        else ""
    )
    print(f"run {run.id}  status {status}  mlflow {run.mlflow_run_id or '-'}{role}")
    facts = _facts(run)
    record = run.record
    if record is not None and (imported := record.start.imported) is not None and imported.limit is not None:
        facts = facts._replace(limit=f"first {imported.limit:g} per subject ({imported.tool}'s --limit)")
    print(
        f"model {run.model_name} ({facts.version}, {facts.dtype}), {facts.scoring}, {_prompt(run)}, "
        f"k={run.k}, limit {facts.limit}"
    )
    print(f"data {run.data_fingerprint}  template {run.template_hash}  commit {run.git_commit or '-'}")
    finished = f"{run.finished_at:%Y-%m-%d %H:%M:%S} UTC" if run.finished_at else "-"
    print(
        f"created {run.created_at:%Y-%m-%d %H:%M:%S} UTC  finished {finished}  output {run.output_dir or '-'}"
    )
    if record is not None and record.start.imported is not None:
        print(record.start.imported.summary())

    for claim in store.shards(run.id):
        beat = f"last beat {claim.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC" if claim.heartbeat_at else "no beat"
        who = claim.owner.rsplit(":", 2)[0] if claim.owner else "-"  # host:pid
        print(
            f"shard {claim.shard} of {claim.shards}  {claim.status}  process {who}  "
            f"scheduler {claim.scheduler or '-'}  {beat}"
        )
    if noise := store.noise.latest(run.protocol):
        n = run.protocol.n_questions
        print(
            f"noise floor of this protocol: measurement {noise.id[:12]} ({noise.created_at:%Y-%m-%d}, "
            f"reference {noise.reference_run_id[:12]}, n = {noise.n}): up to {100 * noise.flip_rate:.1f} % "
            f"flips (at most {100 * noise.flip_upper:.1f} %), at this run's n = {n} δ from "
            f"{100 * noise.margin_at(n, DEFAULT_ALPHA):.2f} pts (α = {DEFAULT_ALPHA})"
        )
    else:
        print(
            "noise floor of this protocol: not measured (python -m mmlu_track.noise with this run's settings)"
        )
    if stop := run.early_stop:
        resumed = "" if run.status == RunStatus.STOPPED else " (since resumed)"
        print(f"{stop.summary()}{resumed}: {stop.reason}; baseline {stop.baseline_run_id}")
    _scores(store, run)
    return 0


def _scores(store: SqlStore, run: StoredRun) -> None:
    """A finished run's tables (a circular run's circular accuracy first), else what is committed."""
    if record := run.record:
        from mmlu_track.records.results import table
        from mmlu_track.records.robustness import circular_table

        if record.circular:  # its headline first: circular accuracy, the accuracy as given beside it
            print(circular_table(record.scores, record.circular))
        print(table(record.scores))
        if record.reasoning:  # a chain of thought: the answers each rule read, the generations cut
            print(record.reasoning.line())
        if record.annotated and record.start.data.annotations:  # MMLU-Redux: as the run said it
            print(record.start.data.annotations.summary())
            print(record.annotated.summary())
    else:
        committed = store.question_results(run.id)
        subjects = len({r.subject for r in committed})
        print(f"unfinished: {len(committed)} of {run.n_questions} questions committed ({subjects} subjects)")


def _sync(store: SqlStore, args: argparse.Namespace) -> int:
    """Exit 2 when a run could not be logged (1 is the gate's verdict alone), in one line."""
    from mmlu_track.eval.plan import question_docs
    from mmlu_track.store.mlflow import MlflowUnavailable, log_run, uri_for_sync

    pending = store.runs(limit=10_000, unsynced=True)
    failed: list[str] = []
    for run in pending:
        record = run.record
        if record is None:
            raise RuntimeError(f"unsynced run {run.id} has no record (a bug: only finished runs are listed)")
        # Where the process that finished the run tried (its warning's hint names that URI), unless
        # the command says otherwise; a run recorded before URIs were resolved: MLflow's default.
        experiment = args.experiment or record.start.config.tracking.experiment
        try:
            uri = uri_for_sync(args.mlflow_uri or record.start.mlflow_uri)
            mlflow_id = log_run(
                record, store.question_results(run.id), uri=uri, experiment=experiment,
                existing=run.mlflow_run_id, docs=question_docs(record),
            )  # fmt: skip
        except MlflowUnavailable as err:
            failed.append(f"run {run.id[:12]}: {str(err).splitlines()[0]}")
            continue
        store.set_mlflow_run(run.id, mlflow_id, synced=True)
        print(f"run {run.id[:12]} -> MLflow run {mlflow_id} (experiment {experiment!r})")
    print(f"{len(pending) - len(failed)} of {len(pending)} unsynced runs logged to MLflow")
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        print(
            f"mmlu_track: error: {len(failed)} of {len(pending)} unsynced runs could not be logged to "
            f"MLflow; {failed[0]}{more}; they stay unsynced: run sync again when MLflow is back, or "
            "give --mlflow-uri",
            file=sys.stderr,
        )
        return 2
    return 0


def _db_upgrade(url: str) -> None:
    from mmlu_track.store.db import DB_ERRORS, db_error, open_engine, upgrade

    engine = open_engine(url)
    try:
        revision = upgrade(engine, shared=True)
    except DB_ERRORS as err:  # an unreachable server: the driver's own error type
        raise db_error(url, err, "cannot be upgraded") from err
    finally:
        engine.dispose()
    print(f"{redact(url)}: schema at {revision}")


def _noise(store: SqlStore, args: argparse.Namespace) -> int:
    """The noise measurements, newest first: what the gate reads for a protocol."""
    entries = store.noise.entries(args.limit)
    if not entries:
        print("no noise measurement recorded yet: python -m mmlu_track.noise model=... [settings]")
        return 0
    print(
        f"{'id':<12} {'created':<19}  {'model':<28} {'n':>6} {'flips %':>7} {'floor pts':>9}  "
        "reference    mlflow"
    )
    for e in entries:
        print(
            f"{e.id[:12]:<12} {e.created_at:%Y-%m-%d %H:%M:%S}  {e.model_name[:28]:<28} {e.n:>6} "
            f"{100 * e.flip_rate:>7.2f} {100 * e.margin:>9.2f}  {e.reference_run_id[:12]} "
            f"{e.mlflow_run_id or '-'}"
        )
    return 0


COMMANDS = {"list": _list, "show": _show, "sync": _sync, "noise": _noise}


class OneLineParser(argparse.ArgumentParser):
    """argparse's usage errors as every command's errors: one line starting `mmlu_track: error:`,
    exit 2 (argparse printed its usage, then `python -m mmlu_track.runs: error: …`)."""

    def error(self, message: str) -> NoReturn:
        """Print the usage error as one `mmlu_track: error:` line that points to --help, and exit 2."""
        print(f"mmlu_track: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_ERROR)


def _parser() -> OneLineParser:
    """The command's parser: `--db`, then one subcommand (each also taking `--db` after it)."""
    parser = OneLineParser(
        prog="python -m mmlu_track.runs",
        description=__doc__.splitlines()[0],
        epilog="exit codes: 0 done, 2 unusable input (one line on stderr), 70 a bug in mmlu_track",
    )
    db_default = env_default(TrackingConfig, "db_url")  # tracking.db_url's, as every command's
    parser.add_argument("--db", default=db_default, help=f"SQLAlchemy URL (default: {redact(db_default)})")
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="list runs, newest first")
    p_list.add_argument("--limit", type=int, default=50)
    p_list.add_argument("--no-noise", action="store_true", help="leave out the noise command's runs")
    p_show = sub.add_parser("show", help="show one run")
    p_show.add_argument("run", help="run id (or a unique prefix), or its MLflow run id")
    p_sync = sub.add_parser("sync", help="log finished runs that are not in MLflow yet")
    p_sync.add_argument(
        "--mlflow-uri", default=None, help="tracking URI (default: each run's own, else MLflow's default)"
    )
    p_sync.add_argument("--experiment", default=None, help="(default: each run's own, else mmlu_track)")
    p_noise = sub.add_parser("noise", help="list the noise measurements, newest first")
    p_noise.add_argument("--limit", type=int, default=20)
    p_upgrade = sub.add_parser(
        "db-upgrade", help="upgrade a shared (server) results database to this version's schema"
    )
    p_import = import_runs.add_parser(sub)
    # `runs list --db URL` as `runs --db URL list`
    for each in (p_list, p_show, p_sync, p_noise, p_upgrade, p_import):
        each.add_argument("--db", default=argparse.SUPPRESS, help="SQLAlchemy URL (as before the command)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m mmlu_track.runs` on `argv` (default: the command line): its exit code, 0 done or 2
    unusable input or a run that could not be synced (one line on stderr). A bug exits 70 (`exits.bug`);
    a reader that stopped (BrokenPipeError) is raised on to `cli`."""
    # Passwords found by parsing, before anything prints the URL (one with a space defeats patterns)
    remember_urls([*(sys.argv[1:] if argv is None else argv), env_default(TrackingConfig, "db_url")])
    args = _parser().parse_args(argv)

    from mmlu_track.store.sql import SqlStore

    try:
        if args.command == "db-upgrade":
            _db_upgrade(args.db)
            return 0
        if args.command == "import":  # makes the store where there is none yet
            return import_runs.run(args)
        url = parse_url(args.db)
        local = url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:")
        if local and not Path(str(url.database)).expanduser().exists():  # reading must not create a store
            # A listing of nothing is an empty answer (exit 0); a run asked for by id is not there.
            said = f"no results database at {url.database}: no run recorded there yet"
            if args.command == "show":
                print(f"mmlu_track: error: {said}", file=sys.stderr)
                return EXIT_ERROR
            print(f"mmlu_track.runs: {said}", file=sys.stderr)
            return 0
        store = SqlStore(args.db)
        try:
            return COMMANDS[args.command](store, args)
        finally:
            store.close()
    except MmluTrackError as err:
        print(f"mmlu_track: error: {redact_text(str(err).splitlines()[0])}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:
        raise  # the reader stopped: `cli` ends quietly
    except Exception as err:
        from mmlu_track.commands.exits import bug

        bug(err)


def cli() -> None:
    """The `mmlu-track-runs` console script. Output piped to a reader that stops early (`| head`)
    ends the listing quietly, exit 0: the reader had what it wanted."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = reader_gone(0)
    sys.exit(code)


if __name__ == "__main__":
    cli()
