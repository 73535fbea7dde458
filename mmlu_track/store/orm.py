"""SQLAlchemy 2 typed ORM of the results store. Change it only together with a migration."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """The declarative base of the store's tables (its metadata: the schema the migrations make)."""

    pass


class Run(Base):
    """One evaluation. `identity` hashes everything that determines its results (for resuming)."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    identity: Mapped[str] = mapped_column(String(64), index=True)
    # running | finalizing | finished | failed | stopped (by the sequential gate; resumable)
    status: Mapped[str] = mapped_column(String(16), index=True)
    model_name: Mapped[str] = mapped_column(String(255), index=True)
    model_revision: Mapped[str | None] = mapped_column(String(255))
    model_dtype: Mapped[str | None] = mapped_column(String(16))  # as loaded (auto resolved); None before 0009
    scoring: Mapped[str] = mapped_column(String(32))
    formulation: Mapped[str] = mapped_column(String(32))
    k: Mapped[int] = mapped_column(Integer)
    data_fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    template_hash: Mapped[str] = mapped_column(String(32))
    git_commit: Mapped[str | None] = mapped_column(String(64))
    config_json: Mapped[str] = mapped_column(Text)
    record_json: Mapped[str | None] = mapped_column(Text)  # results.json once finished
    n_questions: Mapped[int] = mapped_column(Integer)
    acc_micro: Mapped[float | None] = mapped_column(Float)
    acc_macro: Mapped[float | None] = mapped_column(Float)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64), index=True)  # opened when scoring starts
    mlflow_synced_at: Mapped[datetime | None] = mapped_column(DateTime)  # when it was completely logged
    output_dir: Mapped[str | None] = mapped_column(Text)
    sweep: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)  # runs list: newest first
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    owner: Mapped[str | None] = mapped_column(String(255))  # sql.Owner of the claimer or finalizer
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime)  # its last beat
    stop_json: Mapped[str | None] = mapped_column(Text)  # record.EarlyStop: the sequential gate stopped it
    protocol_json: Mapped[str | None] = mapped_column(Text)  # EvalProtocol (None: stored before 0007)
    # records.stored.RunRole: `evaluation` (a version of the model), or `noise` (made by the noise
    # command: a measurement of the protocol, never what a model name resolves to unless asked).
    role: Mapped[str] = mapped_column(String(16), server_default="evaluation")

    # A model's finished runs, newest first (the gate's lookup by model name): one index serves the
    # whole query, whatever the planner knows of the table.
    __table_args__ = (Index("ix_runs_model_status_created", "model_name", "status", "created_at"),)


class RunShard(Base):
    """One shard of a run and the process scoring it (an unsharded run has one: shards=1, shard=0)."""

    __tablename__ = "run_shards"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    shards: Mapped[int] = mapped_column(Integer, primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))  # running | done | failed
    owner: Mapped[str | None] = mapped_column(String(255))  # sql.Owner: host, pid, start time, boot
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime)  # its last beat
    scheduler: Mapped[str | None] = mapped_column(String(255))  # liveness.scheduler(): SLURM job, Ray task
    work_json: Mapped[str | None] = mapped_column(Text)  # records.stored.ShardWork, once it is done


class SubjectScore(Base):
    """One subject's score in a finished run (`SqlStore.finish`): questions, correct, accuracy as a
    fraction, and its standard error (None below two questions)."""

    __tablename__ = "subject_scores"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    subject: Mapped[str] = mapped_column(String(64), primary_key=True)
    n: Mapped[int] = mapped_column(Integer)
    correct: Mapped[int] = mapped_column(Integer)
    acc: Mapped[float] = mapped_column(Float)
    stderr: Mapped[float | None] = mapped_column(Float)


class QuestionRow(Base):
    """One scored question; (subject, question_index) joins two runs question by question."""

    __tablename__ = "question_results"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    subject: Mapped[str] = mapped_column(String(64), primary_key=True)
    question_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    prompt_hash: Mapped[str] = mapped_column(String(32))
    shots_used: Mapped[int] = mapped_column(Integer)
    n_tokens: Mapped[int] = mapped_column(Integer)
    truncated: Mapped[bool] = mapped_column(Boolean)
    logprob_a: Mapped[float | None] = mapped_column(Float)
    logprob_b: Mapped[float | None] = mapped_column(Float)
    logprob_c: Mapped[float | None] = mapped_column(Float)
    logprob_d: Mapped[float | None] = mapped_column(Float)
    # MMLU-Pro's letters E-J (NULL where a question has fewer options, and for every MMLU row).
    logprob_e: Mapped[float | None] = mapped_column(Float)
    logprob_f: Mapped[float | None] = mapped_column(Float)
    logprob_g: Mapped[float | None] = mapped_column(Float)
    logprob_h: Mapped[float | None] = mapped_column(Float)
    logprob_i: Mapped[float | None] = mapped_column(Float)
    logprob_j: Mapped[float | None] = mapped_column(Float)
    options: Mapped[int] = mapped_column(Integer, server_default="4")  # QuestionResult.options
    src: Mapped[str | None] = mapped_column(String(128))  # QuestionResult.src (MMLU-Pro's origin)
    # A chain of thought's (QuestionResult.extraction, new_tokens, finish); NULL for any other question.
    extraction: Mapped[str | None] = mapped_column(String(16))
    new_tokens: Mapped[int | None] = mapped_column(Integer)
    finish: Mapped[str | None] = mapped_column(String(8))
    generated: Mapped[str | None] = mapped_column(Text)
    prediction: Mapped[int | None] = mapped_column(Integer)
    gold: Mapped[int] = mapped_column(Integer)
    correct: Mapped[bool] = mapped_column(Boolean)
    margin: Mapped[float | None] = mapped_column(Float)
    scored_by: Mapped[str | None] = mapped_column(String(16))  # QuestionResult.scored_by
    # A circular run's rotations 1..n-1 (QuestionResult.rotations as JSON); NULL: asked as given.
    rotations_json: Mapped[str | None] = mapped_column(Text)
    # Its MMLU-Redux annotation (QuestionResult.annotation); NULL: none given, or not annotated.
    annotation: Mapped[str | None] = mapped_column(String(32))


class ComparisonRow(Base):
    """One comparison of two runs (`python -m mmlu_track.compare`) and its verdict."""

    __tablename__ = "comparisons"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    baseline_run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    candidate_run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    mode: Mapped[str] = mapped_column(String(16))
    policy: Mapped[str] = mapped_column(String(64))
    verdict: Mapped[str] = mapped_column(String(16))  # pass | regression | inconclusive | analysis
    delta_micro: Mapped[float] = mapped_column(Float)
    delta_macro: Mapped[float] = mapped_column(Float)
    p_regression: Mapped[float | None] = mapped_column(Float)
    p_noninferiority: Mapped[float | None] = mapped_column(Float)
    margin: Mapped[float] = mapped_column(Float)
    n_flagged: Mapped[int] = mapped_column(Integer)
    report_json: Mapped[str] = mapped_column(Text)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime)


class NoiseRow(Base):
    """One measurement of an evaluation's own noise (`python -m mmlu_track.noise`)."""

    __tablename__ = "noise_floors"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    protocol_key: Mapped[str] = mapped_column(String(64), index=True)  # records.run.EvalProtocol.key()
    model_name: Mapped[str] = mapped_column(String(255))
    reference_run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    n: Mapped[int] = mapped_column(Integer)
    flip_rate: Mapped[float] = mapped_column(Float)  # the largest among the gated pairs
    margin: Mapped[float] = mapped_column(Float)  # the smallest δ a noise-only pair passes 95 % of the time
    shot_seed_range: Mapped[float | None] = mapped_column(Float)
    report_json: Mapped[str] = mapped_column(Text)  # commands.noise.NoiseReport.to_json()
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)  # runs noise: newest first
