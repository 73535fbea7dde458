"""Chat prompts for a served model, against the real llama-cpp-python server (`tests/serve.py`;
the first test against llama.cpp's own `llama-server` too): generation through the server's own
template (`/v1/chat/completions`) on both, log-probs of prompts rendered here by
`model.tokenizer`'s template on llama-server, compared with the in-process path on the same
prompts; a server whose template renders chats differently is refused before anything is recorded.
The CLI is called in-process (`cli` fixture)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mmlu_track.eval import openai_connect
from mmlu_track.store.sql import SqlStore

from ..serve import API_KEY, N_CTX, LlamaCppServer, LlamaServer
from .test_openai_api import BOUNDS, KEY_ENV, MIN_SAME_PREDICTIONS, Cli, _config, _eval, _served


def test_chat_prompts_are_scored_through_the_server_as_in_process(
    any_server: LlamaServer, tokenizer_dir: Path, cli: Cli, local_runs: Callable[..., None], tmp_path: Path
) -> None:
    """k=2 multiturn, served and in-process: the same prompts (hashes), log-probs within the raw
    prompts' 5-shot bounds (k=2: the same Q4_1 vs fp32 arithmetic), the same predictions but for
    quantization noise; generation went through the server's chat endpoint, rendered by the
    server's own template. Log-probs on llama.cpp's server only: they score the prompts rendered
    here as raw completions, what each run's probe checks the server reads as this tokenizer does
    (llama-cpp-python's reading: the refusal test below), at 4x llama-server's cost."""
    server = any_server
    scorings = ("logprob", "generate") if isinstance(server, LlamaCppServer) else ("generate",)
    chat = ["chat=multiturn", "k=2", "tracking.mlflow=false"]
    common = ["subjects=[anatomy,virology]", "limit=3", f"max_length={N_CTX}", "device=cpu", *chat]
    local_runs(*([*common, "dtype=float32", f"scoring={scoring}"] for scoring in ("logprob", "generate")))
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    weights = store.runs()[0].model_revision  # declared the same weights: the gate compares them
    for scoring in scorings:
        args = _served(server.base_url, *chat, f"model.tokenizer={tokenizer_dir}", f"scoring={scoring}")
        served = _eval(cli, tmp_path, *args, f"model.revision={weights}", out=f"served-{scoring}")
        assert served.code == 0, served.err
    runs = {(r.config.model.source, r.config.scoring.method): r for r in store.runs()}
    assert {r.template_hash for r in runs.values()} == {runs[("gguf", "logprob")].template_hash}
    how = {"logprob": "top_logprobs", "generate": "chat_completion"}  # the server's own template for chats
    pairs = {}
    for scoring in scorings:
        a = {(q.subject, q.index): q for q in store.question_results(runs[("gguf", scoring)].id)}
        b = {(q.subject, q.index): q for q in store.question_results(runs[("openai_api", scoring)].id)}
        assert a.keys() == b.keys()
        assert all(a[q].prompt_hash == b[q].prompt_hash for q in a)
        assert np.mean([a[q].prediction == b[q].prediction for q in a]) >= MIN_SAME_PREDICTIONS
        assert {q.scored_by for q in b.values()} == {how[scoring]}
        pairs[scoring] = [(a[q], b[q]) for q in a]
    if "logprob" in pairs:
        deltas = np.abs([np.subtract(x.logprobs, y.logprobs) for x, y in pairs["logprob"]])  # type: ignore[arg-type]
        assert deltas.max() < BOUNDS[2][0]
        assert deltas.mean() < BOUNDS[2][1]
    assert all(y.generated and y.generated.strip() for _, y in pairs["generate"])  # the assistant's text
    db = f"tracking.db_url=sqlite:///{tmp_path / 'store.db'}", "tracking.mlflow=false"
    method = scorings[0]
    pair = f"baseline={runs[('gguf', method)].id}", f"candidate={runs[('openai_api', method)].id}"
    gated = cli("compare", *pair, *db, cwd=tmp_path)
    assert gated.code in (0, 1), gated.err  # a verdict, not a refusal: the same chat prompts
    assert "not comparable" not in gated.err


EXAMINER = "{{ 'You are an examiner.\\n' }}"  # a line of template the server does not have


def _tokenizer_copy(tokenizer_dir: Path, where: Path, *, prepend: str = "", add_bos: bool = False) -> Path:
    shutil.copytree(tokenizer_dir, where)
    template = where / "chat_template.jinja"
    template.write_text(prepend + template.read_text())
    if add_bos:  # SmolLM2's BOS (<|im_start|>) put before every text by the tokenizer's post-processor
        doc = json.loads((where / "tokenizer.json").read_text())
        post, bos = doc["post_processor"], {"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}
        post["single"], post["pair"] = [bos, *post["single"]], [bos, *post["pair"]]
        token = "<|im_start|>"
        post["special_tokens"][token] = {"id": token, "ids": [1], "tokens": [token]}
        (where / "tokenizer.json").write_text(json.dumps(doc))
    return where


def test_a_served_chat_run_whose_tokenizer_has_no_template_is_one_line(
    server: LlamaServer, tokenizer_dir: Path, cli: Cli, tmp_path: Path
) -> None:
    """It ended in a traceback (issue 39); in-process it was this line already."""
    bare = _tokenizer_copy(tokenizer_dir, tmp_path / "tokenizer")
    (bare / "chat_template.jinja").unlink()
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    args = _served(server.base_url, "chat=single_turn", "k=0", "tracking.mlflow=false")
    got = _eval(cli, tmp_path, *args, f"model.tokenizer={bare}")
    assert got.code == 2, got.err
    (line,) = got.errors
    assert "chat=single_turn needs the model's chat template, and the tokenizer of" in line
    assert SqlStore(f"sqlite:///{tmp_path / 'store.db'}").runs() == []


@pytest.mark.parametrize("scoring", ["generate", "logprob"])
def test_a_server_that_reads_chats_otherwise_is_refused_before_anything_is_recorded(
    server: LlamaServer,
    tokenizer_dir: Path,
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scoring: str,
) -> None:
    """Generation: model.tokenizer's template is not the one the server applies (a line added to
    it), so the server would answer other prompts than the ones recorded and hashed. Log-probs (of
    the prompt rendered here, whatever the server's template): model.tokenizer adds a BOS token
    the server does not (SmolLM2's BOS is the <|im_start|> its template opens with: sent once, by
    neither side here), so the server would score another prompt."""
    if scoring == "generate":
        other = _tokenizer_copy(tokenizer_dir, tmp_path / "tokenizer", prepend=EXAMINER)
    else:
        other = _tokenizer_copy(tokenizer_dir, tmp_path / "tokenizer", add_bos=True)
    args = _served(server.base_url, "chat=single_turn", "k=0", f"scoring={scoring}", "tracking.mlflow=false")
    got = _eval(cli, tmp_path, *args, f"model.tokenizer={other}")
    assert got.code == 2, got.err
    (line,) = got.errors
    assert SqlStore(f"sqlite:///{tmp_path / 'store.db'}").runs() == []
    if scoring == "generate":
        assert "a probe chat: the server's chat template makes" in line
        assert "differently from the template this run records" in line
        # Log-probs are those of the prompts rendered and recorded here: with the same template the
        # server lacks, a logprob run goes on (its own template hash: tests/eval/test_chat_template.py).
        logprob = _served(server.base_url, "chat=single_turn", "k=0", "tracking.mlflow=false", limit=1)
        assert _eval(cli, tmp_path, *logprob, f"model.tokenizer={other}", out="lp").code == 0
        recorded = json.loads((tmp_path / "lp" / "results.json").read_text())
        assert recorded["prompt"]["example"].startswith("You are an examiner.\n<|im_start|>system\n")
        return
    assert "a probe chat: the server reads this prompt as" in line
    assert "a BOS token added on one side only" in line
    monkeypatch.setenv(KEY_ENV, API_KEY)
    served = openai_connect.connect(_config(server.base_url, tokenizer=str(other)))  # type: ignore[arg-type]
    try:  # the <|im_start|> the template renders is not sent: a server adding BOS adds the only one
        text = served.apply_chat_template([{"role": "user", "content": "Hi"}])
        assert served.bos_text == "<|im_start|>"
        assert served._wire(text) == text.removeprefix("<|im_start|>") != text
    finally:
        served.close()
