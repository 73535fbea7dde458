"""The same command run again takes its finished run (`finished_twin`): a re-run CI job, a sweep
launched twice. Found before the model is loaded, from the run's identity as loading would make it
(`plan.identity` over the settings, the weights pinned (`eval.pins`), the planned questions and the
prompts' template); nothing is scored, no run is recorded, the command ends as the first did.

`tracking.rerun=true` scores again on purpose: a run of its own, labelled `rerun` in MLflow. A
hub model at a branch, whose commit is known only once it is loaded, is reused after loading.
"""

from __future__ import annotations

from mmlu_track.eval import prompts
from mmlu_track.eval.load import pinned
from mmlu_track.eval.pins import Pinned
from mmlu_track.eval.plan import Plan, identity
from mmlu_track.records.protocol import EvalProtocol
from mmlu_track.records.run import ModelInfo
from mmlu_track.records.stored import RunStatus, StoredRun
from mmlu_track.settings.config import EvalConfig
from mmlu_track.store.db import sqlite_file
from mmlu_track.store.recorder import RunRecorder


def _identity(cfg: EvalConfig, the_plan: Plan, weights: Pinned, template_hash: str) -> str:
    info = ModelInfo(cfg.model.name, cfg.model.source, weights.location, weights.revision,
                     weights.weights_sha256, weights.dtype, "", 0, False, 0, 0)  # fmt: skip
    protocol = EvalProtocol.of(
        cfg,
        questions=the_plan.fingerprint,
        n_questions=len(the_plan.all_questions),
        dev_fingerprint=the_plan.dev_fingerprint,
        template_hash=template_hash,
    )
    annotated = the_plan.annotated.info.fingerprint if the_plan.annotated else None
    return identity(cfg, info, protocol, annotations=annotated)


def finished_twin(
    cfg: EvalConfig, the_plan: Plan, recorder: RunRecorder, *, stopped: bool = False
) -> StoredRun | None:
    """The newest finished run this command would score again, else None (also where the weights
    are known only once loaded: `evaluate.run` looks again then). `stopped`: a run the sequential
    gate stopped counts too (the gated command, whose verdict on it is recorded)."""
    where = sqlite_file(cfg.tracking.db_url)
    if where is not None and not where.exists():  # no store yet: nothing to reuse, and none made to look
        return None
    weights = pinned(cfg)
    if isinstance(weights, str):
        return None
    if cfg.chat.style == "none":
        hashes = [prompts.template_hash(cfg.formulation)]
    else:  # the chat template is the pinned weights' own: a finished run of theirs recorded its hash
        hashes = list(
            dict.fromkeys(r.template_hash for r in recorder.store.finished_runs(cfg.model.name, noise=True))
        )
    for template_hash in hashes:
        ident = _identity(cfg, the_plan, weights, template_hash)
        if (
            going := recorder.store.unfinished(ident, role=recorder.role)
        ) is not None:  # still going or interrupted: resumes
            return going if stopped and going.status == RunStatus.STOPPED else None
        kept = recorder.finished(ident)
        if kept is not None:
            return kept[0]
    return None


def reused_line(stored: StoredRun) -> str:
    """What the command says of the finished run it took instead of scoring again."""
    record = stored.record
    name = record.start.name if record is not None else stored.model_name
    where = f"; results in {stored.output_dir}" if stored.output_dir else ""
    if (stop := stored.early_stop) is not None and stored.status == RunStatus.STOPPED:
        what = (
            f"already gated: run {stored.id} ({name}), stopped by the sequential gate ({stop.verdict}) at "
            f"look {stop.look} of {stop.looks}, {stop.questions_scored} of {stop.questions_total} questions"
        )
    else:
        accuracy = f"{100 * record.scores.micro.acc:.2f} %" if record is not None else "?"
        what = f"already evaluated: run {stored.id} ({name}), micro accuracy {accuracy}"
    return f"{what}{where}; nothing scored again (tracking.rerun=true scores it again as a run of its own)"
