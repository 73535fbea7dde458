"""eval/load.py: every model source has a loader, a served model is not computed in this process,
and the tiny model's loader gives the in-process backend, ready to tokenize and score."""

from __future__ import annotations

from typing import get_args

from mmlu_track.eval.in_process import InProcess
from mmlu_track.eval.load import BACKENDS, in_process, load_backend
from mmlu_track.settings.config import ModelSource

from ..conftest import compose_eval


def test_each_source_has_a_backend_and_only_a_served_one_runs_elsewhere() -> None:
    assert set(BACKENDS) == set(get_args(ModelSource))
    assert in_process(compose_eval(["model=tiny"]))
    url = "model.base_url=http://127.0.0.1:9/v1"
    served = compose_eval(["model=openai_api", url, "model.served_name=m", "model.revision=r1"])
    assert not in_process(served)


def test_the_tiny_models_loader_gives_the_in_process_backend() -> None:
    backend = load_backend(compose_eval(["model=tiny", "device=cpu"]))
    try:
        assert isinstance(backend, InProcess)
        assert backend.info.source == "tiny"
        assert backend.encode("Answer:")  # it tokenizes
        assert backend.traffic().requests == 0  # no server
    finally:
        backend.close()
