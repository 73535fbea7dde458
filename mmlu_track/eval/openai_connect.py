"""Reaching a served model (`model.source=openai_api`): `load` checks the served name against
`GET /v1/models`, fixes the tokenizer (`model.tokenizer`, else the server's tokenize endpoint) and
the context length, checks that `/v1/completions` gives next-token log-probs (scoring=logprob) and
whether its echoed log-probs can be trusted, and that the server's chat template renders chats as
`model.tokenizer`'s does (chat generation); every refusal is one line (`ModelError`), before
anything is recorded. What the loaded `openai_api.Served` then does: its own module.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

from mmlu_track.eval.backend import ModelError, PromptError
from mmlu_track.eval.chat_template import source as template_source
from mmlu_track.eval.data import Question
from mmlu_track.eval.http_api import Client, PermanentError, probe
from mmlu_track.eval.openai_api import Served, Wire, logprobs_of, one_choice
from mmlu_track.eval.prompts import Messages, Style, messages
from mmlu_track.records.run import ModelInfo
from mmlu_track.settings.config import EvalConfig
from mmlu_track.settings.subjects import letters
from mmlu_track.support.console import warn
from mmlu_track.support.credentials import redact_text

ECHO_TOLERANCE = 1e-3  # nats: the same distribution computed in two requests (batching moves the last digits)
# The connect checks' prompt: any text after which " A" is one token works, and a short one is cheap
# (a server may sort the whole vocabulary for every token it echoes: a 25-token question made each
# served run's connect ~2 s against llama-cpp-python's server, this one ~0.3 s).
_PROBE = "Answer:"


def _tokenizer(cfg: EvalConfig, client: Client) -> tuple[Callable[[str], list[int]], int, int | None, Any]:
    """(encode, vocabulary size or 0, the context length the tokenize endpoint reports, the local
    tokenizer or None)."""
    model = cfg.model
    if model.tokenizer:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(model.tokenizer)
        except (OSError, ValueError) as err:
            raise ModelError(
                f"model.tokenizer={model.tokenizer!r} cannot be loaded: {str(err).splitlines()[0]}"
            ) from None
        return (lambda text: list(tok(text)["input_ids"])), len(tok), None, tok
    root = client.root
    # vLLM (and SGLang) `/tokenize`; llama-cpp-python `/extras/tokenize`; llama.cpp's own server `/tokenize`.
    ways: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
        (f"{root}/tokenize", lambda t: {"model": model.served_name, "prompt": t}),
        (f"{root}/extras/tokenize", lambda t: {"model": model.served_name, "input": t}),
        (f"{root}/tokenize", lambda t: {"content": t}),
    ]
    for path, body in ways:
        doc = probe(client, "POST", path, body("Answer: A"))
        # Tokens, not an empty list: llama.cpp's server answers vLLM's body (no `content`) with none.
        if isinstance(doc, dict) and isinstance(doc.get("tokens"), list) and doc["tokens"]:

            def encode(
                text: str, path: str = path, body: Callable[[str], dict[str, Any]] = body
            ) -> list[int]:
                return [int(t) for t in client.post(path, body(text), full=True)["tokens"]]

            length = doc.get("max_model_len")
            return encode, 0, int(length) if isinstance(length, int) else None, None
    raise ModelError(
        f"the server at {client.shown} has no tokenize endpoint (vLLM and llama.cpp /tokenize, "
        "llama-cpp-python /extras/tokenize): set model.tokenizer= to a local folder or hub id of the served "
        "model's tokenizer"
    )


def _next_token(served: Wire) -> dict[str, Any]:
    """The next-token alternatives of a fixed prompt: the server gives log-probs, or the run is
    refused here, before anything is recorded."""
    top = served.cfg.model.top_logprobs
    try:
        first, _ = served.top(_PROBE, top)
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


def _echo_usable(served: Wire, want: dict[str, Any]) -> bool:
    """Whether echoed log-probs are those of the next-token distribution `want` (see the module docstring)."""
    top = served.cfg.model.top_logprobs
    try:
        lp = logprobs_of(one_choice(served.complete(_PROBE + " A", max_tokens=1, logprobs=top, echo=True)))
    except (PromptError, PermanentError):  # no echo, or no log-probs with it; a dead server still raises
        return False
    at = [j for j, off in enumerate(lp.get("text_offset") or []) if off == len(_PROBE)]
    got = lp["top_logprobs"][at[0]] if at and at[0] < len(lp["top_logprobs"]) else None
    if not isinstance(got, dict):
        return False
    best = max(want, key=lambda k: want[k])
    return best in got and math.isclose(float(got[best]), float(want[best]), abs_tol=ECHO_TOLERANCE)


def _chat_probe(cfg: EvalConfig) -> Messages:
    """A chat of the run's shape (its formulation, style, system message, up to two shot turns)
    with plain one-space ASCII content, which any two tokenizers of one model split alike."""
    question = Question("marketing", "test", 0, "Which letter comes first?", ("A", "B", "C", "D"), 0)
    shots = [
        Question("marketing", "dev", i, "Which letter comes last?", ("A", "B", "C", "D"), 3) for i in range(2)
    ]
    return messages(
        cfg.formulation, "marketing", shots[: cfg.k], question, chat=cfg.chat.style, system=cfg.chat.system
    )


def _llama_server(props: object) -> str | None:
    """llama.cpp's own C++ server names itself by its `/props` build (llama-cpp-python has none)."""
    if isinstance(props, dict) and isinstance(props.get("build_info"), str):
        return f"llama.cpp's llama-server (build {props['build_info']})"
    return None


def _batching_warning(engine: str | None, props: object, in_flight: int) -> str | None:
    """llama-server decodes the prompts of its slots together, and a prompt batched with others gets
    other log-probs than alone (measured on the packaged model: 18 of 20 5-shot questions differ,
    by up to 0.15, one prediction flipped): repeatable only with one slot or one request at a time."""
    slots = props.get("total_slots") if isinstance(props, dict) else None
    if engine is None or not isinstance(slots, int) or slots < 2 or in_flight < 2:
        return None
    return (
        f"{engine} serves {slots} slots: a prompt's log-probs change with the prompts batched with it "
        "(up to 0.15 measured), so a repeated run can differ; start it with -np 1, or set "
        "model.max_concurrency=1, for repeatable scores"
    )


def _template_differs(theirs: int, ours: int, engine: str | None) -> str:
    how = "serve that template"
    if engine is not None:  # its flag for a template file; --chat-template takes only built-in names
        how = f"start {engine} with --chat-template-file TOKENIZER/chat_template.jinja"
    return (
        f"the server's chat template makes {theirs} prompt tokens of it and model.tokenizer's makes "
        f"{ours}: the server renders chats differently from the template this run records ({how}, "
        "or use chat=none)"
    )


def _tokens_differ(theirs: int, ours: int) -> str:
    return (
        f"the server reads this prompt as {theirs} tokens and model.tokenizer as {ours} (special "
        "tokens read as text, or a BOS token added on one side only): its log-probs would be of "
        "another prompt than the one recorded"
    )


def _check_chat_template(served: Wire, engine: str | None) -> None:
    """Chat prompts: refused here, before anything is recorded, when the server reads a probe chat
    as another number of tokens than `model.tokenizer` — its log-probs would be of other prompts
    (logprob: the rendering sent as text), or its template is not ours (generate: its own)."""
    generate = served.cfg.scoring.method == "generate"
    probe_chat = _chat_probe(served.cfg)
    try:
        if generate:
            _, theirs, text, _ = served.chat_completion(probe_chat, 1)
            ours = len(served.encode(text))
        else:
            theirs, ours = served.chat_prompt_tokens(probe_chat)
    except PermanentError as err:
        if not generate:
            raise
        raise ModelError(
            f"{err}; chat={served.cfg.chat.style} with scoring=generate needs the server's chat endpoint"
        ) from None
    except PromptError as err:
        raise ModelError(f"a probe chat: {err}") from None
    if theirs and theirs != ours:
        why = _template_differs(theirs, ours, engine) if generate else _tokens_differ(theirs, ours)
        raise ModelError(f"a probe chat: {why}")


def _described(client: Client, listed: dict[str, Any], props: object = None) -> str:
    """What the server says of itself and the model (recorded with the run): `/v1/models`'s entry
    and its version where it has an endpoint for it (vLLM `/version`; llama.cpp's own server's
    `/props`: its build and model file)."""
    version = probe(client, "GET", f"{client.root}/version")
    doc = {"models_entry": listed, **({"version": version} if isinstance(version, dict) else {})}
    if isinstance(props, dict):
        doc["props"] = {k: props[k] for k in ("build_info", "model_path", "total_slots") if k in props}
    # Recorded with the run: a server may echo the request's headers (the key) in what it says.
    return redact_text(json.dumps(doc, sort_keys=True))[:2000]


def connect(cfg: EvalConfig) -> Served:
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
        model.base_url or "",
        api_key=key,
        timeout_s=model.timeout_s,
        max_retries=model.max_retries,
        max_in_flight=model.max_concurrency,
    )
    try:
        return _connect(cfg, client)
    except BaseException:
        client.close()
        raise


def _letters_scorable(wire: Wire, split: list[str], engine: str | None) -> bool:
    """Whether echoed log-probs can be trusted (checked against a next-token request); refused in
    one line when a letter of several tokens (`split`) needs them and they cannot."""
    echo_ok = _echo_usable(wire, _next_token(wire))
    if split and not echo_ok:
        server = f"the server at {wire.client.shown}"
        if engine is not None:  # no flag of its turns echo on (llama.cpp issue 27174)
            server += f" ({engine}, which has no flag for them)"
        raise ModelError(
            f"the letter {split[0]!r} is several tokens for {wire.cfg.model.served_name}, so only "
            f"echoed log-probs can score it, and {server} does not echo usable ones"
        )
    return echo_ok


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
    encode, vocab, tokenize_length, tokenizer = _tokenizer(cfg, client)
    props = probe(client, "GET", f"{client.root}/props")  # llama.cpp's own server: its slots' context
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    props_length = settings.get("n_ctx") if isinstance(settings, dict) else None
    engine = _llama_server(props)
    said = _batching_warning(engine, props, model.max_concurrency)
    if said is not None:
        warn(said)
    length = cfg.max_length or listed.get("max_model_len") or tokenize_length or props_length
    if not isinstance(length, int) or length < 16:
        raise ModelError(
            f"the server at {client.shown} does not say {model.served_name}'s context length: "
            "set max_length= to the context it serves (llama.cpp: --n_ctx, vLLM: --max-model-len)"
        )
    widest = 10 if cfg.benchmark == "mmlu_pro" else 4  # the letters the benchmark's questions can have
    continuations = [Style(cfg.chat.style).answer_lead + letter for letter in letters(widest)]
    letter_ids = [encode(f"Answer:{c}")[len(encode("Answer:")) :] for c in continuations]
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
        server=_described(client, listed, props),
    )
    wire = Wire(cfg, client, encode, tokenizer)
    split = [c for c, ids in zip(continuations, letter_ids, strict=True) if len(ids) != 1]
    echo_ok = _letters_scorable(wire, split, engine) if cfg.scoring.method == "logprob" else False
    # Without a template the run is refused by `plan.style` in the in-process backend's words.
    if cfg.chat.style != "none" and template_source(tokenizer) is not None:
        _check_chat_template(wire, engine)
    return Served(wire, info, echo_ok=echo_ok)
