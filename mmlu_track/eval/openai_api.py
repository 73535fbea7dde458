"""The served-model backend: a model behind an OpenAI-compatible `/v1/completions` (vLLM, SGLang,
TGI, llama.cpp), satisfying `backend.Backend`, as `openai_connect.load` reaches and checks it. No
torch, no transformers (a local tokenizer, where given, is loaded there).

Log-prob scoring is exact or refused, never a floor or a guess. For each prompt it asks for the
next token's `top_logprobs` alternatives (`max_tokens=1`, temperature 0): when all the letters
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
sequence: it could cut the text before the letter), read as in-process (`answers.read_answer`).

Chat prompts (`chat` not `none`) need `model.tokenizer`, whose chat template renders them here (it
is the template the run's hash records). Log-probs: the rendered text goes to `/v1/completions` as
above, the letters being `"A"`..`"D"` (what an assistant turn starts with). Generation goes to
`/v1/chat/completions` with the messages themselves, so the server applies its own template, as
the model is used in production (`scored_by="chat_completion"`). At load a probe chat of the run's
shape (its style, system message and shot turns, plain ASCII content) must come to as many prompt
tokens on the server as with `model.tokenizer` (`openai_connect`), or the run is refused in one
line: a server whose template differs, reads special tokens as text or adds a second BOS token
would score other prompts than the ones recorded. Per question the counts are not compared: an
engine's tokenizer may split ordinary text otherwise (llama.cpp merges the two spaces before a
digit that transformers splits), as it does for raw prompts.

Requests: up to `model.max_concurrency` in flight; a unit's first prompt goes alone so the server's
prefix cache (vLLM's automatic prefix caching, SGLang's radix cache, llama.cpp's prompt cache)
holds the shared few-shot prefix before the rest arrive. Faults and secrets: `http_api`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from mmlu_track.eval.answers import argmax, extract, per_letter, read_answer
from mmlu_track.eval.backend import (
    GenerationRequest,
    LetterRequest,
    ModelError,
    Progress,
    PromptError,
    Score,
    Traffic,
)
from mmlu_track.eval.chat_template import render as render_chat
from mmlu_track.eval.chat_template import source as template_source
from mmlu_track.eval.http_api import Client, PermanentError
from mmlu_track.eval.prompts import Messages
from mmlu_track.records.run import ModelInfo
from mmlu_track.settings.config import EvalConfig


def one_choice(doc: Any) -> dict[str, Any]:
    """The single choice of a completions answer; `PromptError` unless `choices` holds exactly one object."""
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        n = len(choices) if isinstance(choices, list) else "no"
        raise PromptError(f"the server answered with {n} choices, not 1")
    return choices[0]


def _legacy(lp: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's own server answers /v1/completions with chat-style log-probs (`content`: per
    token its `token`, `logprob` and `top_logprobs` as a list of {token, logprob}): the legacy
    layout (`tokens`, `token_logprobs`, `top_logprobs` as token -> log-prob) with no `text_offset`,
    which that server never gives (it does not echo a prompt): echo is then not usable."""
    content = lp.get("content")
    if "top_logprobs" in lp or not isinstance(content, list) or not all(isinstance(c, dict) for c in content):
        return lp
    tops = [c.get("top_logprobs") for c in content]
    if not all(isinstance(t, list) and all(isinstance(x, dict) for x in t) for t in tops):
        return lp
    return {
        "tokens": [c.get("token") for c in content],
        "token_logprobs": [c.get("logprob") for c in content],
        "top_logprobs": [{x.get("token"): x.get("logprob") for x in t} for t in tops],
    }


def logprobs_of(choice: dict[str, Any]) -> dict[str, Any]:
    """A choice's `logprobs` in the legacy completions layout (llama.cpp's chat-style layout converted);
    `PromptError` when it has none or no `top_logprobs` list."""
    lp = choice.get("logprobs")
    lp = _legacy(lp) if isinstance(lp, dict) else lp
    if not isinstance(lp, dict) or not isinstance(lp.get("top_logprobs"), list):
        raise PromptError(
            "the server's answer has no log-probs (does it support `logprobs` in /v1/completions?)"
        )
    return lp


@dataclass(frozen=True)
class Ended:
    """How a served generation ended, as the server says: its `finish_reason` (`stop`: a stop
    string or its end; `length`: `max_tokens` or its own context limit) and its completion tokens."""

    reason: object
    tokens: int


def _usage(doc: dict[str, Any], what: str = "prompt_tokens") -> int:
    """The tokens a server reports (`prompt_tokens`, `completion_tokens`); 0 where it reports none
    (or not as a count: `usage` is informative only, never a reason to refuse an answer)."""
    usage = doc.get("usage")
    tokens = usage.get(what) if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else 0


def _number(value: object, what: str) -> float:
    """A log-prob from a server's JSON: a number, else the question is refused (never a traceback);
    whether it can be a log-probability is `answers.check`'s."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PromptError(f"the server's log-prob for {what!r} is {value!r}, not a number")
    return float(value)


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


class Wire:
    """The server as the load-time probes and the backend speak to it: completions, the next
    token's top log-probs, chat completions (no scoring)."""

    def __init__(
        self, cfg: EvalConfig, client: Client, encoder: Callable[[str], list[int]], tokenizer: Any = None
    ) -> None:
        """The run's settings, the server's `client`, the `encoder` of its tokens (the local tokenizer's
        or the server's tokenize endpoint) and `model.tokenizer`'s tokenizer, or None where not given."""
        self.cfg = cfg
        self.client = client
        self._encode = encoder
        self.tokenizer = tokenizer  # model.tokenizer's, when given: its chat template renders chat prompts
        # A template that renders the BOS token itself loses it on the wire when the tokenizer adds its
        # own (as the server then does): one BOS, as in-process (`models.LoadedModel.encode_many`).
        bos = None if tokenizer is None else tokenizer.bos_token_id
        adds_bos = bos is not None and encoder("a")[:1] == [bos]
        self.bos_text: str | None = tokenizer.bos_token if adds_bos else None

    def encode(self, text: str) -> list[int]:
        """The token ids of `text`, as the `encoder` given at construction returns them."""
        return self._encode(text)

    def complete(self, prompt: str, **params: Any) -> dict[str, Any]:
        """The server's JSON answer to `POST /completions` of `prompt` at temperature 0 with `params`
        added; `ModelError` when it is not a JSON object (or the request fails, `http_api`)."""
        body = {"model": self.cfg.model.served_name, "prompt": prompt, "temperature": 0, **params}
        doc = self.client.post("/completions", body)
        if not isinstance(doc, dict):
            raise ModelError("POST /completions: the answer is not a JSON object")
        return doc

    def top(self, text: str, k: int) -> tuple[dict[str, Any] | None, int]:
        """The next token's `k` most likely alternatives (token text -> log-prob), prompt tokens."""
        doc = self.complete(text, max_tokens=1, logprobs=k)
        lp = logprobs_of(one_choice(doc))
        if not lp["top_logprobs"]:
            # The greedy next token ended the text and this server (llama-cpp-python) then reports no
            # token at all: ask again with one token forced. It samples another; its log-probs are
            # still the raw distribution (tested: the end token keeps its own log-prob among them).
            doc = self.complete(text, max_tokens=1, logprobs=k, min_tokens=1)
            lp = logprobs_of(one_choice(doc))
        first = lp["top_logprobs"][0] if lp["top_logprobs"] else None
        return (first if isinstance(first, dict) else None), _usage(doc)

    def _wire(self, text: str) -> str:
        """A chat prompt as sent: without a BOS token the server adds itself."""
        return text[len(self.bos_text) :] if self.bos_text and text.startswith(self.bos_text) else text

    def chat_prompt_tokens(self, messages: Messages) -> tuple[int, int]:
        """(the prompt tokens the server reports for the chat's local rendering (0: none), those of
        `model.tokenizer`), as log-prob scoring sends a chat prompt."""
        text = self._wire(render_chat(self.tokenizer, messages)[0])
        return self.top(text, 1)[1], len(self._encode(text))

    def chat_completion(self, messages: Messages, max_tokens: int) -> tuple[object, int, str, Ended]:
        """(the assistant's text, the prompt tokens the server reports (0: none), the local
        rendering as it would be sent, how it ended) of greedy generation through the server's own
        chat template (with the scoring's stop strings, where it has any)."""
        text, sent = render_chat(self.tokenizer, messages)  # folded as the local rendering was
        body = {"model": self.cfg.model.served_name, "messages": sent, "temperature": 0}
        stop = {"stop": list(self.cfg.scoring.stop)} if self.cfg.scoring.stop else {}
        doc = self.client.post("/chat/completions", {**body, "max_tokens": max_tokens, **stop})
        if not isinstance(doc, dict):
            raise ModelError("POST /chat/completions: the answer is not a JSON object")
        choice = one_choice(doc)
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        ended = Ended(choice.get("finish_reason"), _usage(doc, "completion_tokens"))
        return content, _usage(doc), self._wire(text), ended


RESUME = " the questions committed so far are kept: run the same command to resume"


class Served(Wire):
    """A model served over the OpenAI-compatible API (`backend.Backend`), complete when made:
    `openai_connect.load` probes the server through a `Wire` first and then builds this with what
    it found (`echo_ok`: whether echoed log-probs can be trusted)."""

    def __init__(self, wire: Wire, info: ModelInfo, *, echo_ok: bool) -> None:
        """The probed `wire`'s server, the model's `info`, whether echo scoring may be used (`echo_ok`);
        from now on a request that fails for good says the run can be resumed."""
        super().__init__(wire.cfg, wire.client, wire._encode, wire.tokenizer)
        self._info = info
        self.echo_ok = echo_ok
        # The most alternatives asked for per token: the vocabulary, lowered to what the server allows.
        # The one thing learned while scoring (vLLM answers a wider request than its --max-logprobs
        # with a 400): kept, so later questions do not ask again.
        self.cap = max(info.vocab_size, wire.cfg.model.top_logprobs) if info.vocab_size else 1_000_000
        # From here on a request that fails for good fails a run, which the same command resumes.
        self.client.after_failure = RESUME

    @property
    def info(self) -> ModelInfo:
        """The served model as the load-time probes described it."""
        return self._info

    def encode(self, text: str) -> list[int]:
        """The token ids of `text` (`model.tokenizer`'s, else the server's tokenize endpoint's)."""
        return self._encode(text)

    @property
    def chat_template(self) -> str | None:
        """`model.tokenizer`'s chat template (its Jinja source), None without one or without a tokenizer."""
        return None if self.tokenizer is None else template_source(self.tokenizer)

    def apply_chat_template(self, messages: Messages) -> str:
        """`messages` rendered by `model.tokenizer`'s template with its generation prompt; `ModelError`
        without `model.tokenizer`."""
        if self.tokenizer is None:  # config validation asks for model.tokenizer with a chat prompt
            raise ModelError("a served model's chat prompts are rendered by model.tokenizer's template")
        return render_chat(self.tokenizer, messages)[0]

    def close(self) -> None:
        """Close the client's kept-alive connections."""
        self.client.close()

    def traffic(self) -> Traffic:
        """The client's requests so far: sent, abandoned at `model.timeout_s`, seconds spent on those."""
        return self.client.traffic()

    def _logprob(self, text: str, continuations: tuple[str, ...]) -> Score:
        k = self.cfg.model.top_logprobs
        first, n_tokens = self.top(text, k)
        # Letters outside the top k: ask for 10x more, as far as the server allows (vLLM refuses more
        # than its --max-logprobs with a 400, remembered as the cap), then echo where it is exact.
        while first and not all(c in first for c in continuations) and k < self.cap:
            wider = min(10 * k, self.cap)
            try:
                first, _ = self.top(text, wider)
            except PermanentError as err:
                if err.status != 400:
                    raise
                self.cap = k
                break
            k = wider
        if first is not None and all(c in first for c in continuations):
            values = per_letter([_number(first[c], c) for c in continuations], len(continuations))
            return Score(
                argmax(values), values, n_tokens=n_tokens, forwarded=n_tokens, scored_by="top_logprobs"
            )
        if not self.echo_ok:
            raise PromptError(
                f"the letters are not all among the server's top {k} next tokens (the most it gives), and "
                "its echoed log-probs are not usable (checked at start): raise its limit, e.g. vLLM's "
                "--max-logprobs"
            )
        echoes = []
        for c in continuations:
            doc = self.complete(text + c, max_tokens=1, logprobs=1, echo=True)
            echoes.append(echo_logprob(logprobs_of(one_choice(doc)), len(text), len(c)))
        values4 = per_letter([e.logprob for e in echoes], len(continuations))
        multi = any(e.tokens > 1 for e in echoes)
        return Score(
            argmax(values4),
            values4,
            n_tokens=n_tokens,
            forwarded=n_tokens * 5,
            multi_pass=multi,
            scored_by="echo",
        )

    def _generate(self, text: str, options: int) -> Score:
        stop = {"stop": list(self.cfg.scoring.stop)} if self.cfg.scoring.stop else {}
        doc = self.complete(text, max_tokens=self.cfg.scoring.max_new_tokens, **stop)
        choice = one_choice(doc)
        ended = Ended(choice.get("finish_reason"), _usage(doc, "completion_tokens"))
        return self._read(choice.get("text"), _usage(doc), "completion", options, ended)

    def _chat(self, messages: Messages, options: int) -> Score:
        content, theirs, text, ended = self.chat_completion(messages, self.cfg.scoring.max_new_tokens)
        # The server's own count; the local one only for a server that reports none.
        return self._read(content, theirs or len(self._encode(text)), "chat_completion", options, ended)

    def _read(self, generated: object, n_tokens: int, how: str, options: int, ended: Ended) -> Score:
        if not isinstance(generated, str):
            raise PromptError("the server's answer has no text")
        scoring = self.cfg.scoring
        if scoring.extract == "cascade":  # a chain of thought: read to its stop string, the rule recorded
            cuts = [generated.index(s) for s in scoring.stop if s in generated]
            kept = generated[: min(cuts)] if cuts else generated
            prediction, rule = extract(kept, options)
            # A server's `length`: cut by max_tokens, or by its own context limit, never a guess.
            finish = "length" if ended.reason == "length" else "stop" if ended.reason == "stop" else None
            return Score(
                prediction, generated=kept, n_tokens=n_tokens, forwarded=n_tokens, scored_by=how,
                extraction=rule, new_tokens=ended.tokens or None, finish=finish,
            )  # fmt: skip
        stripped = len(generated) - len(generated.lstrip())
        # The decided part: up to the first character (first_char), else all of it (pattern).
        decided = generated[: stripped + 1] if scoring.extract == "first_char" else generated
        return Score(
            read_answer(decided, scoring, options),
            generated=decided,
            n_tokens=n_tokens,
            forwarded=n_tokens,
            scored_by=how,
        )

    def score_letters(self, requests: Sequence[LetterRequest], progress: Progress) -> list[Score]:
        """Each prompt's letters by their top log-probs (else echo); a chat prompt is sent as
        rendered here (without a BOS token the server adds itself). A request's `prefix` is the
        server's own business (its prefix cache)."""
        chat = self.cfg.chat.style != "none"

        def job(r: LetterRequest) -> Callable[[], Score]:
            return lambda: self._logprob(self._wire(r.text) if chat else r.text, r.continuations)

        return self._each([job(r) for r in requests], progress)

    def generate(self, requests: Sequence[GenerationRequest], progress: Progress) -> list[Score]:
        """Greedy completions; a chat prompt through the server's chat endpoint (its template)."""

        def job(r: GenerationRequest) -> Callable[[], Score]:
            messages = r.messages
            if messages is not None:
                return lambda: self._chat(messages, r.options)
            return lambda: self._generate(r.text, r.options)

        return self._each([job(r) for r in requests], progress)

    def _each(self, jobs: Sequence[Callable[[], Score]], progress: Progress) -> list[Score]:
        """One subject's requests, `model.max_concurrency` in flight; the first alone (it fills the
        server's prefix cache for the rest). Batching settings do not apply to a server."""

        def answer(i: int) -> Score:
            try:
                return jobs[i]()
            except PromptError as err:
                err.position = i
                raise

        out: list[Score | None] = [None] * len(jobs)
        if not jobs:
            return []
        out[0] = answer(0)
        progress(1)
        try:
            with ThreadPoolExecutor(max_workers=self.cfg.model.max_concurrency) as pool:
                pending: dict[Future[Score], int] = {pool.submit(answer, i): i for i in range(1, len(jobs))}
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
