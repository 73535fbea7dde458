"""The tiny random model (`model=tiny`): built once per process, each load a copy of its own."""

from __future__ import annotations

import torch

from mmlu_track.eval import models

from ..conftest import compose_eval


def test_each_load_of_the_tiny_model_is_its_own_copy_of_the_same_weights() -> None:
    cfg = compose_eval(["model=tiny", "device=cpu", "model.tiny_seed=7"])
    torch.manual_seed(cfg.seed)
    seeded = torch.random.get_rng_state()
    first = models.load_model(cfg).model  # built
    assert torch.equal(torch.random.get_rng_state(), seeded)  # torch as the run's seed left it
    second = models.load_model(cfg).model  # copied
    assert torch.equal(torch.random.get_rng_state(), seeded)
    weights = first.model.embed_tokens.weight
    assert torch.equal(weights, second.model.embed_tokens.weight)
    assert first.lm_head.weight is weights  # tied, as built
    with torch.no_grad():
        weights.zero_()  # what one run does to its model never reaches the next
    assert second.model.embed_tokens.weight.abs().sum() > 0
    assert models.load_model(cfg).model.model.embed_tokens.weight.abs().sum() > 0
    other = compose_eval(["model=tiny", "device=cpu", "model.tiny_seed=8"])
    assert not torch.equal(
        models.load_model(other).model.model.embed_tokens.weight, second.model.embed_tokens.weight
    )
