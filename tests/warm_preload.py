"""What a warm server (`warm.py`) imports before it forks: the modules an evaluation, a comparison
and the stores load, lazy ones included. Imports only: no torch op runs before a fork."""

import datasets  # noqa: F401
import mlflow  # noqa: F401
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite  # noqa: F401
import torch  # noqa: F401
from mlflow.entities import Metric, Param, RunStatus, RunTag  # noqa: F401
from mlflow.tracking import MlflowClient  # noqa: F401
from transformers import (  # noqa: F401
    AttentionInterface,
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    StoppingCriteria,
    StoppingCriteriaList,
)

import mmlu_track.commands.cli
import mmlu_track.commands.runs
import mmlu_track.gate.run
import mmlu_track.gate.sequential_run
import mmlu_track.pipeline.evaluate
import mmlu_track.store.mlflow
import mmlu_track.store.sql  # noqa: F401
