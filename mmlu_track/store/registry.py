"""MLflow's model registry: which run an alias names, and moving an alias to a run that passed."""

from __future__ import annotations

from mmlu_track.store.mlflow_client import MlflowUnavailable, check_reachable, quiet


def alias_run_id(uri: str | None, ref: str) -> str:
    """The MLflow run id behind `models:/<name>@<alias>`. Raises `LookupError` with one line."""
    name, _, alias = ref.removeprefix("models:/").partition("@")
    if not alias:
        raise LookupError(f"{ref!r}: write a registered model alias as models:/<name>@<alias>")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        with quiet():
            version = MlflowClient(tracking_uri=uri).get_model_version_by_alias(name, alias)
    except MlflowException as err:
        raise LookupError(f"no MLflow model version for {ref}: {err.message}") from err
    if not version.run_id:
        raise LookupError(f"the model version behind {ref} has no run id")
    return str(version.run_id)


def promote(uri: str | None, model: str, alias: str, run_id: str, source: str) -> str:
    """Point `model@alias` at a new version referring to the evaluated run (the model is
    registered by reference: `source` is where its weights are; nothing is copied). Returns the
    version. Raises `MlflowUnavailable` on failure."""
    check_reachable(uri)
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        with quiet():
            try:
                client.get_registered_model(model)
            except MlflowException:
                client.create_registered_model(model)
            version = client.create_model_version(model, source, run_id=run_id)
            client.set_registered_model_alias(model, alias, version.version)
        return str(version.version)
    except Exception as err:  # MLflow raises many types; all mean "not promoted"
        raise MlflowUnavailable(
            f"promoting {model}@{alias} in MLflow ({uri or 'default'}) failed: {err}"
        ) from err
