"""MLflow, one room of the store with one face: this module is all that the rest of the package uses.

The gate and the commands hand it typed records and never see a tag, a page or a client:

- `log_comparison(ComparisonRun)`: a decided comparison (or a few-shot gap) as its own run, linked
  from the candidate's; `log_noise(NoiseRun)`: a noise measurement as its own run;
- `promote(Promotion)` and `alias_run_id(uri, "models:/NAME@ALIAS")`: the model registry;
- `LiveRun`: an evaluation's run kept in step with it (the recorder's); `log_run` and
  `uri_for_sync`: a finished run logged in one go (`runs sync`, an evaluation's last try);
- `experiments_of` and `run_page`: where the runs' pages are, for a report's links.

Inside, `client.connect` is the one place a client is made: a server is asked once whether it
answers (seconds, not MLflow's minutes of retries), and HTTP retries are bounded. Every failure of
the tracking store is `MlflowUnavailable` in one line; anything else raised in here is a bug.
Nothing here imports MLflow itself until a call needs it.
"""

from mmlu_track.store.mlflow.client import MlflowUnavailable, experiments_of
from mmlu_track.store.mlflow.comparison import log_comparison, log_noise
from mmlu_track.store.mlflow.entries import (
    ComparisonRun,
    Logged,
    NoiseRun,
    PairedQuestions,
    Promotion,
    Target,
)
from mmlu_track.store.mlflow.live import LiveRun
from mmlu_track.store.mlflow.registry import alias_run_id, promote
from mmlu_track.store.mlflow.sync import log_run, uri_for_sync
from mmlu_track.store.mlflow.views import page as run_page

__all__ = [
    "ComparisonRun",
    "LiveRun",
    "Logged",
    "MlflowUnavailable",
    "NoiseRun",
    "PairedQuestions",
    "Promotion",
    "Target",
    "alias_run_id",
    "experiments_of",
    "log_comparison",
    "log_noise",
    "log_run",
    "promote",
    "run_page",
    "uri_for_sync",
]
