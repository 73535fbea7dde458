"""store/mlflow/registry.py: an alias moved to a run that passed, and the run an alias names, read
back from a real `mlflow server`; a malformed reference or an unknown alias one line
(`LookupError`), an unreachable server `MlflowUnavailable`."""

from __future__ import annotations

import uuid

import pytest
from mlflow.tracking import MlflowClient

from mmlu_track.store.mlflow import MlflowUnavailable, Promotion
from mmlu_track.store.mlflow.registry import alias_run_id, promote

from ...serve import free_port


def test_a_promoted_run_is_what_its_alias_names(mlflow_server: str) -> None:
    client = MlflowClient(tracking_uri=mlflow_server)
    exp = client.create_experiment(f"reg-{uuid.uuid4().hex[:8]}")
    first, second = (client.create_run(exp).info.run_id for _ in range(2))
    model = f"model-{uuid.uuid4().hex[:8]}"
    # A server takes a source inside the run's artifacts only (a hub id or a local path is refused).
    weights = {run: f"{client.get_run(run).info.artifact_uri}/model" for run in (first, second)}
    assert promote(Promotion(mlflow_server, model, "champion", first, weights[first])) == "1"
    assert alias_run_id(mlflow_server, f"models:/{model}@champion") == first
    assert promote(Promotion(mlflow_server, model, "champion", second, weights[second])) == "2"
    assert alias_run_id(mlflow_server, f"models:/{model}@champion") == second  # the alias moved
    with pytest.raises(LookupError, match=f"no MLflow model version for models:/{model}@nobody"):
        alias_run_id(mlflow_server, f"models:/{model}@nobody")


def test_a_malformed_reference_or_a_dead_server_is_one_line() -> None:
    with pytest.raises(LookupError, match="write a registered model alias as models:/<name>@<alias>"):
        alias_run_id(None, "models:/m")  # nothing asked of any server
    dead = f"http://u:pw-8@127.0.0.1:{free_port()}"
    unreachable = r"^MLflow server http://u:\*\*\*@127\.0\.0\.1:\d+ is unreachable"
    with pytest.raises(MlflowUnavailable, match=unreachable):
        alias_run_id(dead, "models:/m@champion")
    with pytest.raises(MlflowUnavailable):
        promote(Promotion(dead, "m", "champion", "r" * 32, "tiny"))


def test_a_model_registered_by_its_hub_id_is_promoted_on_a_tracking_server(mlflow_server: str) -> None:
    """`Promotion`: the model registered by reference, `source` where its weights are (nothing copied)."""
    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.create_run(client.create_experiment(f"reg-{uuid.uuid4().hex[:8]}")).info.run_id
    model = f"model-{uuid.uuid4().hex[:8]}"
    promote(Promotion(mlflow_server, model, "champion", run, "HuggingFaceTB/SmolLM2-135M"))
    assert alias_run_id(mlflow_server, f"models:/{model}@champion") == run
    version = client.get_model_version_by_alias(model, "champion")
    assert version.source == f"runs:/{run}"  # a server refused the hub id as a source (an xfail before)
    assert version.tags["mmlu_track.weights"] == "HuggingFaceTB/SmolLM2-135M"  # where the weights are
