"""Scoring prompts with a loaded model: `SCORERS = {"logprob": ..., "generate": ...}`.

Both scorers are called as `(lm, requests, batching, progress)`: one subject's requests (the
seam's `LetterRequest` / `GenerationRequest`: each prompt's text and the prefix it shares) and the
run's `Batching`; they return one `Score` per request, in order, batched by
`batching.run_batches` (longest first, left-padded, explicit positions: results do not depend on
the batching beyond float rounding). `generate` lives in `generate.py`.

`logprob`: the answer letters (the question's own: `" A"`..`" D"` for four options, up to `" J"`)
are continuations of a raw prompt (the letter carries the leading space; `answer_lead`), `"A"`..
of a chat prompt (the assistant turn's first characters). Their ids are found in context, by
encoding `prompt + " A"` and removing the prompt's ids. When every letter is one token and the
prompt's ids are a prefix (the usual case), one forward pass of the prompt gives all the letters'
log-probs from the last position's logits. Otherwise (a
tokenizer that splits `" A"` or merges across the boundary), each letter's full sequence is
scored and its continuation tokens' log-probs summed; `Score.multi_pass` says so.

Prefix cache (`ScoringConfig.prefix_cache`, both scorers): prompts that share a prefix (a
subject's header and shots) run it once; each question then forwards only its own tokens against
the cached keys and values (`prefix_cache.py`), batched, with position ids continuing after the
prefix. On CPU the prefix's keys and values are not copied at all: `prefix_attention` attends to
them and to the suffix apart and merges the two exactly; on other devices (or models it cannot
serve) the prefix's cache is expanded across the batch. A question whose tokens do not start with
the prefix's tokens takes the plain path (`Score.prefix_fallback`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from mmlu_track.eval import prefix_cache
from mmlu_track.eval.answers import LogProbs, argmax, per_letter
from mmlu_track.eval.backend import LetterRequest, Progress, Score
from mmlu_track.eval.batching import Batching, fit, left_pad, run_batches
from mmlu_track.eval.generate import score_generate
from mmlu_track.eval.models import LoadedModel
from mmlu_track.eval.prefix_cache import Suffixes
from mmlu_track.settings.subjects import letters

__all__ = ["SCORERS", "Score", "Scorer", "run_batches", "score_generate", "score_logprob"]


def _letter_sequences(
    lm: LoadedModel, text: str, lead: str, options: int
) -> tuple[list[int], list[list[int]], bool]:
    """(prompt ids, prompt + letter ids for each letter, whether one pass at the end suffices)."""
    ctx, *wholes = lm.encode_many([text, *(f"{text}{lead}{letter}" for letter in letters(options))])
    one_pass = all(len(w) == len(ctx) + 1 and w[: len(ctx)] == ctx for w in wholes)
    return ctx, wholes, one_pass


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b) - 1) and a[n] == b[n]:
        n += 1
    return n


Encoded = list[tuple[list[int], bool]]
MultiPass = dict[int, list[tuple[int, list[int]]]]


def _encode(
    lm: LoadedModel, requests: Sequence[LetterRequest], lead: str
) -> tuple[Encoded, list[list[int]], MultiPass]:
    """(each text's ids fitted to the context and whether cut, each text's letter ids at the end,
    the letter sequences with their kept prefix of the texts that need a pass per letter)."""
    encoded: Encoded = []
    letter_ids: list[list[int]] = []
    multi: MultiPass = {}
    for i, request in enumerate(requests):
        ctx, wholes, one_pass = _letter_sequences(lm, request.text, lead, request.options)
        encoded.append(fit(ctx, lm.info.max_length))
        letter_ids.append([w[-1] for w in wholes])
        if not one_pass:
            multi[i] = [(_shared_prefix(ctx, w), w) for w in wholes]
    return encoded, letter_ids, multi


def _lead(requests: Sequence[LetterRequest]) -> str:
    """The one answer lead of a subject's requests (raw and chat prompts are never mixed)."""
    leads = {r.answer_lead for r in requests}
    if len(leads) > 1:
        raise ValueError(f"one subject's prompts with different answer leads {sorted(leads)} (a bug)")
    return leads.pop() if leads else " "


def score_logprob(
    lm: LoadedModel, requests: Sequence[LetterRequest], batching: Batching, progress: Progress
) -> list[Score]:
    """Log-probs of the answer lead + each of the question's letters after each request's text.
    With the scoring's `prefix_cache`, each distinct `prefix` (`prompts.shared_prefix`) is run once
    and only the rest of each prompt is forwarded against its cached keys and values."""
    texts = [r.text for r in requests]
    encoded, letter_ids, multi = _encode(lm, requests, _lead(requests))
    one = (i for i in range(len(texts)) if i not in multi)
    prefixes = [r.prefix for r in requests]
    groups, plain = prefix_cache.group(batching.scoring.prefix_cache, prefixes, encoded, one)
    logprobs: list[LogProbs | None] = [None] * len(texts)
    forwarded = [0] * len(texts)

    def take(rows: Sequence[int], lp: torch.Tensor) -> None:
        for r, i in enumerate(rows):
            logprobs[i] = per_letter(lp[r, letter_ids[i]].tolist(), requests[i].options)
        progress(len(rows))

    def with_prefix(prefix_ids: list[int], rows: list[int]) -> str | None:
        return _score_with_prefix(lm, Suffixes(prefix_ids, rows, encoded, forwarded), batching, take)

    def run_plain(rows: list[int]) -> None:
        ids, mask, pos = left_pad([encoded[i][0] for i in rows], lm.pad_id, lm.info.device)
        logits = lm.model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1).logits
        take(rows, torch.log_softmax(logits[:, -1, :].float(), dim=-1))
        for i in rows:
            forwarded[i] = len(encoded[i][0])

    with torch.inference_mode():
        left = prefix_cache.run_groups(lm, groups, encoded, with_prefix)
        plain.extend(left)
        run_batches({i: len(encoded[i][0]) for i in plain}, batching, run_plain)
        for i, conts in multi.items():
            logprobs[i] = _score_sequences(lm, conts)
            forwarded[i] = sum(len(w) for _, w in conts)
            progress(1)
    fallback = set(left) if batching.scoring.prefix_cache else set()
    return [
        Score(
            prediction=argmax(lps),
            logprobs=lps,
            n_tokens=len(encoded[i][0]),
            truncated=encoded[i][1],
            multi_pass=i in multi,
            forwarded=forwarded[i],
            prefix_fallback=i in fallback,
        )
        for i, lps in enumerate(_all_scored(logprobs))
    ]


def _all_scored(logprobs: list[LogProbs | None]) -> list[LogProbs]:
    missing = [i for i, lps in enumerate(logprobs) if lps is None]
    if missing:
        raise RuntimeError(f"prompts {missing[:5]} were never scored (a bug: every prompt takes one path)")
    return [lps for lps in logprobs if lps is not None]


def _score_with_prefix(
    lm: LoadedModel,
    work: Suffixes,
    batching: Batching,
    take: Callable[[Sequence[int], torch.Tensor], None],
    *,
    shared_attention: bool = True,
) -> str | None:
    """Run the prefix once, then each row's remaining tokens against its keys and values; return
    how (`prefix_cache.SuffixForward.how`: "shared" or "cache"), or None (nothing scored: the
    model's cache is not a plain per-layer key/value cache that can be shared)."""

    def run(forward: prefix_cache.SuffixForward, suffixes: Mapping[int, list[int]], batch: list[int]) -> None:
        logits, _ = forward(*left_pad([suffixes[i] for i in batch], lm.pad_id, lm.info.device))
        take(batch, torch.log_softmax(logits.float(), dim=-1))
        for i in batch:
            work.forwarded[i] += len(suffixes[i])

    return prefix_cache.run_suffixes(lm, work, batching, run, shared=shared_attention)


@torch.inference_mode()
def _score_sequences(lm: LoadedModel, conts: list[tuple[int, list[int]]]) -> LogProbs:
    """Sum of log P(token | earlier tokens) over each letter sequence's tokens after its kept prefix."""
    seqs = [whole[-lm.info.max_length :] for _, whole in conts]
    ids, mask, pos = left_pad(seqs, lm.pad_id, lm.info.device)
    lp = torch.log_softmax(
        lm.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float(), dim=-1
    )
    width = ids.shape[1]
    out = []
    for row, ((keep, whole), seq) in enumerate(zip(conts, seqs, strict=True)):
        n_cont = min(len(whole) - keep, len(seq) - 1)
        total = 0.0
        for j in range(width - n_cont, width):
            total += float(lp[row, j - 1, ids[row, j]])
        out.append(total)
    return tuple(out)


class Scorer(Protocol):
    """Scores one subject's requests in order (a scoring method's own request kind: `Any` here). A
    batch holds at most `batching.batch_size` prompts and, unless `batching.batch_tokens` is None,
    at most that many padded tokens (never fewer than one prompt)."""

    def __call__(
        self, lm: LoadedModel, requests: Sequence[Any], batching: Batching, progress: Progress
    ) -> list[Score]:
        """One `Score` per request, in order; `progress(n)` after each n scored."""
        ...


SCORERS: dict[str, Scorer] = {
    "logprob": score_logprob,
    "generate": score_generate,
}
