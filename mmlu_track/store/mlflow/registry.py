"""MLflow's model registry: which run an alias names, and moving an alias to a run that passed.

Both reach the tracking store through `client.connect`: a server that does not answer is one line
within seconds (`MlflowUnavailable`), never MLflow's minutes of retries.
"""

from __future__ import annotations

from mmlu_track.store.mlflow.client import MlflowUnavailable, connect, failures, quiet
from mmlu_track.store.mlflow.entries import Promotion
from mmlu_track.support.credentials import redact, redact_text


def alias_run_id(uri: str | None, ref: str) -> str:
    """The MLflow run id behind `models:/<name>@<alias>`. Raises `LookupError` with one line where
    the registry has no such alias (or its version no run), `MlflowUnavailable` where the tracking
    store cannot be reached or used."""
    name, _, alias = ref.removeprefix("models:/").partition("@")
    if not alias:
        raise LookupError(f"{ref!r}: write a registered model alias as models:/<name>@<alias>")
    from mlflow.exceptions import MlflowException

    client = connect(uri)
    try:
        with quiet():
            version = client.get_model_version_by_alias(name, alias)
    except MlflowException as err:
        if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            raise LookupError(f"no MLflow model version for {ref}: {err.message}") from err
        raise _unusable(uri, f"looking up {ref}", err) from err
    except failures() as err:
        raise _unusable(uri, f"looking up {ref}", err) from err
    if not version.run_id:
        raise LookupError(f"the model version behind {ref} has no run id")
    return str(version.run_id)


WEIGHTS_TAG = "mmlu_track.weights"  # on a promoted version: where the evaluated weights are


def promote(promotion: Promotion) -> str:
    """Point `model@alias` at a new version referring to the evaluated run; the version. Raises
    `MlflowUnavailable` on failure. The version's source is the run (`runs:/ID`: a tracking server
    refuses a hub id or a local path outside the run's artifacts as a source); where the weights
    are (`Promotion.source`) is its `mmlu_track.weights` tag: registered by reference, nothing copied."""
    from mlflow.exceptions import MlflowException

    p = promotion
    client = connect(p.uri)
    try:
        with quiet():
            try:
                client.get_registered_model(p.model)
            except MlflowException:
                client.create_registered_model(p.model)
            version = client.create_model_version(
                p.model, f"runs:/{p.run_id}", run_id=p.run_id, tags={WEIGHTS_TAG: p.source}
            )
            client.set_registered_model_alias(p.model, p.alias, version.version)
    except failures() as err:
        raise _unusable(p.uri, f"promoting {p.model}@{p.alias}", err) from err
    return str(version.version)


def _unusable(uri: str | None, what: str, err: BaseException) -> MlflowUnavailable:
    if isinstance(err, MlflowUnavailable):
        return err
    said = redact_text(str(err).splitlines()[0] if str(err) else type(err).__name__)
    return MlflowUnavailable(f"{what} in MLflow ({redact(uri or 'default')}) failed: {said}")
