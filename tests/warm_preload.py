"""What a warm server (`warm.py`) imports before it forks: the modules an evaluation, a comparison
and the stores load, lazy ones included (matplotlib for a comparison's figure, MLflow's SQL store,
Alembic's commands: ~0.4 s a comparison, ~0.3 s a run that logs to MLflow); Hydra's plugins
discovered and matplotlib's fonts loaded (a first figure drawn); and the tiny model's tokenizer,
parsed once here rather than in each child (`models._converted_tokenizer_loaded` keeps it: 0.4 s a
run). No torch op runs before a fork. All of it frozen out of the garbage collector's sight (as
Python's docs advise before a fork): a child's collections scan what it made, not these objects."""

import gc
import os
from pathlib import Path

import alembic.command  # noqa: F401
import datasets  # noqa: F401
import matplotlib
import matplotlib.pyplot as plt
import mlflow  # noqa: F401
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite  # noqa: F401
import statsmodels.stats.multitest
import statsmodels.stats.proportion  # noqa: F401
import torch  # noqa: F401
from hydra.core.plugins import Plugins
from mlflow.entities import Metric, Param, RunStatus, RunTag  # noqa: F401
from mlflow.store.tracking import sqlalchemy_store, sqlalchemy_workspace_store  # noqa: F401
from mlflow.tracking import MlflowClient  # noqa: F401
from PIL import Image
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
import mmlu_track.commands.launchers
import mmlu_track.commands.runs
import mmlu_track.eval.in_process
import mmlu_track.gate.publish
import mmlu_track.gate.run
import mmlu_track.gate.sequential_run
import mmlu_track.pipeline.evaluate
import mmlu_track.store.mlflow
import mmlu_track.store.mlflow.plots
import mmlu_track.store.sql  # noqa: F401
from mmlu_track.eval import models
from mmlu_track.settings.config import ModelConfig

if "MMLU_TRACK_CACHE" in os.environ:  # the test session's (conftest's `cache_dir`)
    _package, _filename = models.PACKAGED_SMOLLM2
    _key_dir, _gguf, _ = models.gguf_cache(
        ModelConfig(name="tokenizer", source="gguf", package=_package, gguf_file=_filename),
        Path(os.environ["MMLU_TRACK_CACHE"]),
    )
    models._converted_tokenizer_loaded(models._converted_tokenizer(_key_dir, _gguf))

Plugins.instance()  # Hydra's plugin discovery: the first composition in a process pays it
Image.init()  # PIL's image plugins, which matplotlib's savefig loads
matplotlib.use("Agg")  # as `gate/plot.py` selects
_figure = plt.figure()  # the fonts a figure's text needs, loaded and cached
_figure.text(0, 0, "0.1 micro")
_figure.canvas.draw()
plt.close(_figure)

gc.collect()
gc.freeze()
