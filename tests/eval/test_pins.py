"""A model's weights pinned before loading (`load.pinned`, `eval.pins`): what a finished run is
reused by (tests/pipeline/test_reuse.py)."""

from __future__ import annotations

from pathlib import Path

from mmlu_track.eval import pins
from mmlu_track.eval.load import pinned

from ..conftest import compose_eval


def test_weights_are_pinned_before_loading_where_they_can_be(tmp_path: Path) -> None:
    tiny = compose_eval(["experiment=smoke", "device=cpu"])
    assert pinned(tiny) == pins.Pinned("tiny(seed=0)", None, None, "float32")
    packaged = pinned(compose_eval(["device=cpu"]))
    assert isinstance(packaged, pins.Pinned)
    assert packaged.weights_sha256
    assert packaged.location.endswith(".gguf")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    local = pinned(compose_eval(["model=hf_hub", f"model.name_or_path={tmp_path / 'm'}", "device=cpu"]))
    assert isinstance(local, pins.Pinned)
    assert local.weights_sha256
    assert local.revision is None
    commit = "0123456789abcdef0123456789abcdef01234567"
    hub = ["model=hf_hub", "model.name_or_path=org/model", "device=cpu"]
    assert pinned(compose_eval([*hub, f"model.revision={commit}"])) == pins.Pinned(
        "org/model", commit, None, "float32"
    )
    assert pinned(compose_eval([*hub, "model.revision=main"])) == (
        "a hub model at main: its commit is known once loaded"
    )
    served = ["model=openai_api", "model.base_url=http://127.0.0.1:9/v1", "model.served_name=m"]
    assert pinned(compose_eval([*served, "model.revision=r1"])) == pins.Pinned("m", "r1", None, "served")
