"""Chat prompts for a served model, against the real llama-cpp-python server (`tests/serve.py`):
log-probs of prompts rendered here by `model.tokenizer`'s template, generation through the
server's own template (`/v1/chat/completions`), both compared with the in-process path on the same
prompts; a server whose template renders chats differently is refused before anything is recorded.
The CLI is called in-process (`cli` fixture)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from mmlu_track.config import ModelConfig
from mmlu_track.eval import models
from mmlu_track.store.sql import SqlStore

from .serve import N_CTX, LlamaServer
from .test_served import BOUNDS, MIN_SAME_PREDICTIONS, Cli, _eval, _served


@pytest.fixture(scope="session")
def tokenizer_dir(cache_dir: Path) -> Path:
    """The packaged GGUF's tokenizer, converted: the served model's own, with its chat template."""
    package, filename = models.PACKAGED_SMOLLM2
    gguf_cfg = ModelConfig(name="SmolLM2", source="gguf", package=package, gguf_file=filename)
    key_dir, gguf, _ = models._gguf_cache(gguf_cfg, cache_dir)
    return models._converted_tokenizer(key_dir, gguf)


def test_chat_prompts_are_scored_through_the_server_as_in_process(
    server: LlamaServer, tokenizer_dir: Path, cli: Cli, tmp_path: Path
) -> None:
    """k=2 multiturn, logprob and generate, served and in-process: the same prompts (hashes), log-probs
    within the raw prompts' 5-shot bounds (the same Q4_1 vs fp32 arithmetic), the same predictions
    but for quantization noise; generation went through the server's chat endpoint."""
    chat = ["chat=multiturn", "k=2", "tracking.mlflow=false"]
    common = ["subjects=[anatomy,virology]", "limit=3", f"max_length={N_CTX}", "device=cpu", *chat]
    for scoring in ("logprob", "generate"):
        local = _eval(cli, tmp_path, *common, "dtype=float32", f"scoring={scoring}", out=f"local-{scoring}")
        assert local.code == 0, local.err
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    weights = store.runs()[0].model_revision  # declared the same weights: the gate compares them
    for scoring in ("logprob", "generate"):
        args = _served(server.base_url, *chat, f"model.tokenizer={tokenizer_dir}", f"scoring={scoring}")
        served = _eval(cli, tmp_path, *args, f"model.revision={weights}", out=f"served-{scoring}")
        assert served.code == 0, served.err
    runs = {(r.config.model.source, r.config.scoring.method): r for r in store.runs()}
    assert {r.template_hash for r in runs.values()} == {runs[("gguf", "logprob")].template_hash}
    how = {"logprob": "top_logprobs", "generate": "chat_completion"}  # the server's own template for chats
    pairs = {}
    for scoring in ("logprob", "generate"):
        a = {(q.subject, q.index): q for q in store.question_results(runs[("gguf", scoring)].id)}
        b = {(q.subject, q.index): q for q in store.question_results(runs[("openai_api", scoring)].id)}
        assert a.keys() == b.keys()
        assert all(a[q].prompt_hash == b[q].prompt_hash for q in a)
        assert np.mean([a[q].prediction == b[q].prediction for q in a]) >= MIN_SAME_PREDICTIONS
        assert {q.scored_by for q in b.values()} == {how[scoring]}
        pairs[scoring] = [(a[q], b[q]) for q in a]
    deltas = np.abs([np.subtract(x.logprobs, y.logprobs) for x, y in pairs["logprob"]])  # type: ignore[arg-type]
    assert deltas.max() < BOUNDS[5][0]
    assert deltas.mean() < BOUNDS[5][1]
    assert all(y.generated and y.generated.strip() for _, y in pairs["generate"])  # the assistant's text
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}", "tracking.mlflow=false"
    pair = f"baseline={runs[('gguf', 'logprob')].id}", f"candidate={runs[('openai_api', 'logprob')].id}"
    gated = cli("compare", *pair, *db, cwd=tmp_path)
    assert gated.code in (0, 1), gated.err  # a verdict, not a refusal: the same chat prompts
    assert "not comparable" not in gated.err


def test_a_server_whose_chat_template_differs_is_refused_before_anything_is_recorded(
    server: LlamaServer, tokenizer_dir: Path, cli: Cli, tmp_path: Path
) -> None:
    """model.tokenizer's template is not the one the server applies (one line added to it): the
    server's answers would be to other prompts than the ones recorded and hashed."""
    other = tmp_path / "tokenizer"
    shutil.copytree(tokenizer_dir, other)
    template = other / "chat_template.jinja"
    template.write_text("{{ 'You are an examiner.\\n' }}" + template.read_text())
    args = _served(server.base_url, "chat=single_turn", "k=0", "scoring=generate", "tracking.mlflow=false")
    got = _eval(cli, tmp_path, *args, f"model.tokenizer={other}")
    assert got.code == 2, got.err
    (line,) = got.errors
    assert "a probe chat: the server's chat template makes" in line
    assert "differently from the template this run records" in line
    assert SqlStore(f"sqlite:///{tmp_path / 'store.db'}").runs() == []
    # log-probs are read from the prompts rendered here, whatever the server's own template
    logprob = [*args[:-2], "scoring=logprob", "tracking.mlflow=false"]
    assert _eval(cli, tmp_path, *logprob, f"model.tokenizer={other}", out="lp").code == 0
