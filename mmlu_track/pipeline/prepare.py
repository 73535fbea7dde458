"""Everything before a run is recorded: seeds, the plan (questions, shots), the model, every prompt
rendered to fit it, and the run's start record and identity (`Prepared`). Refuses prompts that can
never fit (`plan.TruncationError`) before anything is written."""

from __future__ import annotations

import time
from dataclasses import dataclass

from mmlu_track.eval import load, prompts, provenance
from mmlu_track.eval.backend import Backend
from mmlu_track.eval.plan import Asked, Plan, fits_check, identity, plan, render, rotations, style
from mmlu_track.records.run import DataInfo, HostInfo, RunRole, RunStart
from mmlu_track.settings.config import EvalConfig
from mmlu_track.settings.resolved import Resolved


@dataclass(frozen=True)
class Origin:
    """How this process was started: the sweep it is a job of, the command line it records, and
    whether it takes a finished run of the same identity as it is."""

    sweep: str | None = None  # the sweep's folder (a launched job); None outside a sweep
    command: list[str] | None = None  # the command recorded (default: this process's own)
    # A finished run of this identity is the result, nothing scored: None, unless tracking.rerun (found
    # before the model loads, `pipeline.reuse`); the noise command says for each of its roles.
    reuse: bool | None = None
    host_share: int = (
        1  # the processes this launch runs at once on this host (joblib's jobs): threads=auto divides
    )
    # Take or resume only a run scored at this run's own batching: the noise command's roles (its
    # reference, repeat and batching runs share one identity and must never stand in for each other).
    own_batching: bool = False
    # Said before the run's MLflow name: the role a command gives it (`noise repeat`: the noise
    # command's repeat has the reference's very settings, and so its name).
    label: str | None = None
    # The choices made from the settings as the command started (`pipeline.resolve`); None: the
    # evaluation makes them itself, once, as it starts.
    resolved: Resolved | None = None
    # What the run is: an evaluation of the model, or one of the noise command's measurements
    # (`records.stored.RunRole`: a model name never resolves to those unless asked).
    role: RunRole = RunRole.EVALUATION


@dataclass(frozen=True)
class Prepared:
    """A run ready to be scored (`prepare`): the loaded backend (the caller closes it), the plan,
    every prompt rendered to fit, the start record and identity, and the seconds spent on the data
    (seeds and plan) and on loading the model."""

    lm: Backend
    plan: Plan
    rendered: dict[str, list[prompts.Prompt]]  # each question's prompt as given (units and looks cost them)
    asked: dict[str, list[Asked]]  # every prompt the run scores, each question's rotations included
    start: RunStart
    identity: str
    started: float  # when this process began preparing the run (time.time())
    data_s: float
    model_load_s: float
    answer_lead: str = " "  # what precedes an answer letter (`prompts.Style.answer_lead`)


def prepare(cfg: EvalConfig, origin: Origin, resolved: Resolved, planned: Plan | None = None) -> Prepared:
    """The run about to be scored, with the choices made from its settings (`resolved`: the CPU
    threads the backend sets) and its plan (`planned`, made here when None); the caller closes its `lm`."""
    t0 = time.time()
    seeds = provenance.set_seeds(cfg.seed, torch=load.in_process(cfg))
    the_plan = planned or plan(cfg)
    t1 = time.time()
    lm = load.load_backend(cfg, resolved.threads)  # the backend sets them
    t2 = time.time()
    fits = fits_check(lm, cfg.scoring.max_new_tokens if cfg.scoring.method == "generate" else 1)
    try:
        how = style(cfg, lm)
        rendered = render(cfg, the_plan, lm, fits, how)
        asked = rotations(cfg, the_plan, rendered, lm, fits, how)
    except BaseException:
        lm.close()
        raise
    first = the_plan.all_questions[0]
    host = provenance.host(origin.command)
    start = RunStart(
        config=cfg,
        model=lm.info,
        data=DataInfo(
            source=cfg.data.source,
            path=cfg.data.path,
            fingerprint=the_plan.fingerprint,
            dev_fingerprint=the_plan.dev_fingerprint,
            n_questions=len(the_plan.all_questions),
            annotations=the_plan.annotated.info if the_plan.annotated else None,
        ),
        template_hash=prompts.template_hash(cfg.formulation, how),
        role=origin.role,
        example_prompt=rendered[first.subject][0].text,
        seeds=seeds,
        versions=provenance.versions(),
        git_commit=provenance.git_commit(),
        host=HostInfo(host["hostname"], host["platform"], tuple(host["argv"]), resolved.threads_why),
        sweep=origin.sweep,
        resolved=resolved,
    )
    annotated = the_plan.annotated.info.fingerprint if the_plan.annotated else None
    ident = identity(cfg, lm.info, start.protocol, fresh=not cfg.tracking.resume, annotations=annotated)
    return Prepared(lm, the_plan, rendered, asked, start, ident, t0, t1 - t0, t2 - t1, how.answer_lead)
