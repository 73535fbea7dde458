"""The served-model backend: a model behind an OpenAI-compatible `/v1/completions` (vLLM, SGLang,
TGI, llama.cpp), satisfying `backend.Backend`. No torch; transformers only for a local tokenizer.

Log-prob scoring is exact or refused, never a floor or a guess. For each prompt it asks for the
next token's `top_logprobs` alternatives (`max_tokens=1`, temperature 0): when all four letters
`" A"`..`" D"` are among them, their values are log P(" X" | prompt) as the server computed them
over its whole vocabulary (`scored_by="top_logprobs"`). Otherwise each letter is scored by echo
(lm-evaluation-harness's `local-completions`): prompt + " X" sent with `echo` and `logprobs`, and
the log-probs of the echoed tokens from the prompt's end summed (`scored_by="echo"`); a token that
straddles the prompt's end refuses the question. Echo is used only on a server whose echoed
log-probs are those of the next-token distribution, checked once at load against a next-token
request on the same text (llama-cpp-python's server echoes each token's log-prob under the
distribution *after* it: there a question whose letters are not among the top alternatives is a
one-line error asking for a larger `model.top_logprobs`).

Generation is greedy `/v1/completions` (temperature 0, `max_tokens=scoring.max_new_tokens`, no stop
sequence: it could cut the text before the letter), read as in-process (`backend.read_answer`).

Requests: up to `model.max_concurrency` in flight; a unit's first prompt goes alone so the server's
prefix cache (vLLM's automatic prefix caching, SGLang's radix cache, llama.cpp's prompt cache)
holds the shared few-shot prefix before the rest arrive. Faults and secrets: `http_api`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from mmlu_track.config import EvalConfig, ScoringConfig
from mmlu_track.eval.backend import ModelError, Progress, PromptError, Score, read_answer
from mmlu_track.eval.http_api import Client, PermanentError, probe
from mmlu_track.eval.prompts import Messages
from mmlu_track.records.run import ModelInfo
from mmlu_track.records.subjects import LETTERS

CONTINUATIONS = tuple(f" {letter}" for letter in LETTERS)
RAW_ONLY = "a served model is prompted raw (chat=none) for now"
ECHO_TOLERANCE = 1e-3  # nats: the same distribution computed in two requests (batching moves the last digits)
_PROBE = "Question: Which letter comes first in the alphabet?\nA. A\nB. B\nC. C\nD. D\nAnswer:"


def _choice(doc: Any) -> dict[str, Any]:
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        n = len(choices) if isinstance(choices, list) else "no"
        raise PromptError(f"the server answered with {n} choices, not 1")
    return choices[0]


def _logprobs(choice: dict[str, Any]) -> dict[str, Any]:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("top_logprobs"), list):
        raise PromptError(
            "the server's answer has no log-probs (does it support `logprobs` in /v1/completions?)"
        )
    return lp


def _usage(doc: dict[str, Any]) -> int:
    usage = doc.get("usage") or {}
    return int(usage.get("prompt_tokens") or 0)


def _argmax(values: tuple[float, ...]) -> int:
    return max(range(len(values)), key=values.__getitem__)  # the first of equal values, as np.argmax


def _four(values: list[float]) -> tuple[float, float, float, float]:
    a, b, c, d = values
    return a, b, c, d


@dataclass(frozen=True)
class _Echo:
    """A letter's log-prob from an echoed prompt + letter: the echoed tokens from the prompt's end."""

    logprob: float
    tokens: int


def echo_logprob(lp: dict[str, Any], prompt_chars: int, letter_chars: int) -> _Echo:
    """Sum of the log-probs of the echoed tokens covering the letter (character offsets
    [prompt_chars, prompt_chars + letter_chars)); refused when a token straddles the prompt's end."""
    offsets, tokens, values = lp.get("text_offset"), lp.get("tokens"), lp.get("token_logprobs")
    if not (isinstance(offsets, list) and isinstance(tokens, list) and isinstance(values, list)):
        raise PromptError("the echoed answer has no text_offset/tokens/token_logprobs")
    end = prompt_chars + letter_chars
    picked = [j for j, off in enumerate(offsets) if prompt_chars <= off < end]
    before = [j for j, off in enumerate(offsets) if off < prompt_chars]
    last_before = before[-1] if before else None
    straddles = last_before is not None and offsets[last_before] + len(tokens[last_before]) > prompt_chars
    if not picked or offsets[picked[0]] != prompt_chars or straddles:
        raise PromptError(
            "the server's tokens do not split at the prompt's end (a token spans the prompt and "
            "the letter), so the letter's log-prob cannot be read exactly"
        )
    got = [values[j] for j in picked]
    if any(not isinstance(v, int | float) for v in got):
        raise PromptError("the server gave no log-prob for the letter's token")
    return _Echo(float(sum(got)), len(got))


class Served:
    """A model served over the OpenAI-compatible API (`backend.Backend`)."""

    def __init__(
        self,
        cfg: EvalConfig,
        client: Client,
        encoder: Callable[[str], list[int]],
        info: ModelInfo,
        *,
        echo_ok: bool,
    ) -> None:
        self.cfg = cfg
        self.client = client
        self._encode = encoder
        self._info = info
        self.echo_ok = echo_ok
        # The most alternatives asked for per token: the vocabulary, lowered to what the server allows.
        self.cap = max(info.vocab_size, cfg.model.top_logprobs) if info.vocab_size else 1_000_000

    @property
    def info(self) -> ModelInfo:
        return self._info

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    chat_template = None  # served models are prompted raw for now (config validation says so)

    def apply_chat_template(self, messages: Messages) -> str:
        raise ModelError(RAW_ONLY)

    def close(self) -> None:
        self.client.close()

    def _complete(self, prompt: str, **params: Any) -> dict[str, Any]:
        body = {"model": self.cfg.model.served_name, "prompt": prompt, "temperature": 0, **params}
        doc = self.client.post("/completions", body)
        if not isinstance(doc, dict):
            raise ModelError("POST /completions: the answer is not a JSON object")
        return doc

    def _top(self, text: str, k: int) -> tuple[dict[str, Any] | None, int]:
        """The next token's `k` most likely alternatives (token text -> log-prob), prompt tokens."""
        doc = self._complete(text, max_tokens=1, logprobs=k)
        lp = _logprobs(_choice(doc))
        if not lp["top_logprobs"]:
            # The greedy next token ended the text and this server (llama-cpp-python) then reports no
            # token at all: ask again with one token forced. It samples another; its log-probs are
            # still the raw distribution (tested: the end token keeps its own log-prob among them).
            doc = self._complete(text, max_tokens=1, logprobs=k, min_tokens=1)
            lp = _logprobs(_choice(doc))
        first = lp["top_logprobs"][0] if lp["top_logprobs"] else None
        return (first if isinstance(first, dict) else None), _usage(doc)

    def _logprob(self, text: str) -> Score:
        k = self.cfg.model.top_logprobs
        first, n_tokens = self._top(text, k)
        # Letters outside the top k: ask for 10x more, as far as the server allows (vLLM refuses more
        # than its --max-logprobs with a 400, remembered as the cap), then echo where it is exact.
        while first and not all(c in first for c in CONTINUATIONS) and k < self.cap:
            wider = min(10 * k, self.cap)
            try:
                first, _ = self._top(text, wider)
            except PermanentError as err:
                if err.status != 400:
                    raise
                self.cap = k
                break
            k = wider
        if first is not None and all(c in first for c in CONTINUATIONS):
            values = _four([float(first[c]) for c in CONTINUATIONS])
            return Score(
                _argmax(values), values, n_tokens=n_tokens, forwarded=n_tokens, scored_by="top_logprobs"
            )
        if not self.echo_ok:
            raise PromptError(
                f"the letters are not all among the server's top {k} next tokens (the most it gives), and "
                "its echoed log-probs are not usable (checked at start): raise its limit, e.g. vLLM's "
                "--max-logprobs"
            )
        echoes = []
        for c in CONTINUATIONS:
            doc = self._complete(text + c, max_tokens=1, logprobs=1, echo=True)
            echoes.append(echo_logprob(_logprobs(_choice(doc)), len(text), len(c)))
        values4 = _four([e.logprob for e in echoes])
        multi = any(e.tokens > 1 for e in echoes)
        return Score(
            _argmax(values4),
            values4,
            n_tokens=n_tokens,
            forwarded=n_tokens * 5,
            multi_pass=multi,
            scored_by="echo",
        )

    def _generate(self, text: str) -> Score:
        doc = self._complete(text, max_tokens=self.cfg.scoring.max_new_tokens)
        generated = _choice(doc).get("text")
        if not isinstance(generated, str):
            raise PromptError("the server's answer has no text")
        stripped = len(generated) - len(generated.lstrip())
        # The decided part: up to the first character (first_char), else all of it (pattern).
        decided = generated[: stripped + 1] if self.cfg.scoring.extract == "first_char" else generated
        n_tokens = _usage(doc)
        return Score(
            read_answer(decided, self.cfg.scoring),
            generated=decided,
            n_tokens=n_tokens,
            forwarded=n_tokens,
            scored_by="completion",
        )

    def score(
        self,
        texts: Sequence[str],
        cfg: ScoringConfig,
        batch_size: int,
        progress: Progress,
        *,
        prefixes: Sequence[str] | None = None,
        max_tokens: int | None = None,
        answer_lead: str = " ",
    ) -> list[Score]:
        """One subject's prompts, `model.max_concurrency` requests in flight; the first alone (it
        fills the server's prefix cache for the rest). Batching settings do not apply to a server."""
        if answer_lead != " ":  # config validation refuses chat prompts for a served model
            raise ModelError(RAW_ONLY)
        how = self._logprob if cfg.method == "logprob" else self._generate

        def one(i: int) -> Score:
            try:
                return how(texts[i])
            except PromptError as err:
                err.position = i
                raise

        out: list[Score | None] = [None] * len(texts)
        if not texts:
            return []
        out[0] = one(0)
        progress(1)
        try:
            with ThreadPoolExecutor(max_workers=self.cfg.model.max_concurrency) as pool:
                pending: dict[Future[Score], int] = {pool.submit(one, i): i for i in range(1, len(texts))}
                try:
                    while pending:
                        finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in finished:
                            out[pending.pop(fut)] = fut.result()
                        progress(len(finished))
                except BaseException:  # Ctrl-C or a failed question: leaving waits for the threads
                    for fut in pending:
                        fut.cancel()
                    self.client.interrupt()
                    raise
        finally:
            self.client.resume()
        return [s for s in out if s is not None]


def _tokenizer(cfg: EvalConfig, client: Client) -> tuple[Callable[[str], list[int]], int, int | None]:
    """(encode, vocabulary size or 0, the context length the tokenize endpoint reports)."""
    model = cfg.model
    if model.tokenizer:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(model.tokenizer)
        except (OSError, ValueError) as err:
            raise ModelError(
                f"model.tokenizer={model.tokenizer!r} cannot be loaded: {str(err).splitlines()[0]}"
            ) from None
        return (lambda text: list(tok(text)["input_ids"])), len(tok), None
    root = client.root
    # vLLM (and SGLang) `/tokenize`; llama-cpp-python `/extras/tokenize`; llama.cpp's own server `/tokenize`.
    ways: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
        (f"{root}/tokenize", lambda t: {"model": model.served_name, "prompt": t}),
        (f"{root}/extras/tokenize", lambda t: {"model": model.served_name, "input": t}),
        (f"{root}/tokenize", lambda t: {"content": t}),
    ]
    for path, body in ways:
        doc = probe(client, "POST", path, body("Answer: A"))
        if isinstance(doc, dict) and isinstance(doc.get("tokens"), list):

            def encode(
                text: str, path: str = path, body: Callable[[str], dict[str, Any]] = body
            ) -> list[int]:
                return [int(t) for t in client.post(path, body(text), full=True)["tokens"]]

            length = doc.get("max_model_len")
            return encode, 0, int(length) if isinstance(length, int) else None
    raise ModelError(
        f"the server at {client.shown} has no tokenize endpoint (vLLM /tokenize, llama-cpp-python "
        "/extras/tokenize): set model.tokenizer= to a local folder or hub id of the served model's tokenizer"
    )


def _next_token(served: Served) -> dict[str, Any]:
    """The next-token alternatives of a fixed prompt: the server gives log-probs, or the run is
    refused here, before anything is recorded."""
    top = served.cfg.model.top_logprobs
    try:
        first, _ = served._top(_PROBE, top)
    except (PromptError, PermanentError) as err:
        first, why = None, f": {err}"
    else:
        why = ""
    if not first:
        raise ModelError(
            f"the server at {served.client.shown} gives no next-token log-probs in /v1/completions "
            f"(logprobs={top}){why}; scoring=logprob needs them (scoring=generate does not)"
        )
    return first


def _echo_usable(served: Served, want: dict[str, Any]) -> bool:
    """Are echoed log-probs those of the next-token distribution `want` (see the module docstring)?"""
    top = served.cfg.model.top_logprobs
    try:
        lp = _logprobs(_choice(served._complete(_PROBE + " A", max_tokens=1, logprobs=top, echo=True)))
    except (PromptError, PermanentError):  # no echo, or no log-probs with it; a dead server still raises
        return False
    at = [j for j, off in enumerate(lp.get("text_offset") or []) if off == len(_PROBE)]
    got = lp["top_logprobs"][at[0]] if at and at[0] < len(lp["top_logprobs"]) else None
    if not isinstance(got, dict):
        return False
    best = max(want, key=lambda k: want[k])
    return best in got and math.isclose(float(got[best]), float(want[best]), abs_tol=ECHO_TOLERANCE)


def _described(client: Client, listed: dict[str, Any]) -> str:
    """What the server says of itself and the model (recorded with the run): `/v1/models`'s entry
    and its version where it has an endpoint for it (vLLM `/version`)."""
    version = probe(client, "GET", f"{client.root}/version")
    doc = {"models_entry": listed, **({"version": version} if isinstance(version, dict) else {})}
    return json.dumps(doc, sort_keys=True)[:2000]


def load(cfg: EvalConfig) -> Served:
    """Reach the server, check the served name against `GET /v1/models`, fix the tokenizer and the
    context length, and check whether echo can be trusted; raises `ModelError` in one line."""
    model = cfg.model
    key = None
    if model.api_key_env:
        key = os.environ.get(model.api_key_env)
        if not key:
            raise ModelError(
                f"model.api_key_env={model.api_key_env} but ${model.api_key_env} is not set or empty"
            )
    client = Client(
        model.base_url or "", api_key=key, timeout_s=model.timeout_s, max_retries=model.max_retries
    )
    try:
        return _connect(cfg, client)
    except BaseException:
        client.close()
        raise


def _connect(cfg: EvalConfig, client: Client) -> Served:
    model = cfg.model
    try:
        listing = client.get("/models")
    except PermanentError as err:
        if err.status == 404 and not client.shown.endswith("/v1"):
            raise ModelError(
                f"{err}; an OpenAI-compatible server answers below /v1: try model.base_url={client.shown}/v1"
            ) from None
        raise
    entries = listing.get("data") if isinstance(listing, dict) else None
    ids = [e.get("id") for e in entries or [] if isinstance(e, dict)]
    if model.served_name not in ids:
        shown = ", ".join(map(str, ids[:10])) or "none"
        raise ModelError(
            f"model.served_name={model.served_name!r} is not served at {client.shown} "
            f"(GET /v1/models lists: {shown})"
        )
    listed = next(e for e in entries or [] if isinstance(e, dict) and e.get("id") == model.served_name)
    encode, vocab, tokenize_length = _tokenizer(cfg, client)
    length = cfg.max_length or listed.get("max_model_len") or tokenize_length
    if not isinstance(length, int) or length < 16:
        raise ModelError(
            f"the server at {client.shown} does not say {model.served_name}'s context length: "
            "set max_length= to the context it serves (llama.cpp: --n_ctx, vLLM: --max-model-len)"
        )
    letters = [encode(f"Answer:{c}")[len(encode("Answer:")) :] for c in CONTINUATIONS]
    info = ModelInfo(
        name=model.name,
        source=model.source,
        location=str(model.served_name),
        revision=model.revision,
        weights_sha256=None,
        dtype="served",
        device=client.shown,
        max_length=int(length),
        add_bos=False,
        vocab_size=vocab,
        n_parameters=0,
        server=_described(client, listed),
    )
    served = Served(cfg, client, encode, info, echo_ok=False)
    if cfg.scoring.method == "logprob":
        served.echo_ok = _echo_usable(served, _next_token(served))
        split = [c for c, ids in zip(CONTINUATIONS, letters, strict=True) if len(ids) != 1]
        if split and not served.echo_ok:
            raise ModelError(
                f"the letter {split[0]!r} is several tokens for {model.served_name}, so only echoed "
                f"log-probs can score it, and the server at {client.shown} does not echo usable ones"
            )
    # From here on a request that fails for good fails a run, which the same command resumes.
    client.after_failure = " the questions committed so far are kept: run the same command to resume"
    return served
