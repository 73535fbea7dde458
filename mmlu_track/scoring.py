"""Scoring prompts with a loaded model: `SCORERS = {"logprob": ..., "generate": ...}`.

Both scorers take the prompt texts of one subject and return one `Score` per prompt, in order.
Batches are left-padded with explicit position ids, so each row is computed as if alone: results
do not depend on `batch_size` beyond float rounding.

`logprob`: the answer letters are continuations `" A"`..`" D"` (the letter carries the leading
space). Their ids are found in context, by encoding `prompt + " A"` and removing the prompt's ids.
When all four are one token each and the prompt's ids are a prefix (the usual case), one forward
pass of the prompt gives all four log-probs from the last position's logits. Otherwise (a
tokenizer that splits `" A"` or merges across the boundary), each letter's full sequence is
scored and its continuation tokens' log-probs summed; `Score.multi_pass` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mmlu_track.config import ScoringConfig
from mmlu_track.data import LETTERS
from mmlu_track.models import LoadedModel

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Score:
    """The raw outcome for one prompt. `prediction` is None for an invalid generation."""

    prediction: int | None
    logprobs: tuple[float, float, float, float] | None = None
    generated: str | None = None
    n_tokens: int = 0
    truncated: bool = False
    multi_pass: bool = False


def _fit(ids: list[int], max_len: int) -> tuple[list[int], bool]:
    # Context fitting already dropped shots; a 0-shot prompt still too long keeps its end.
    return (ids[-max_len:], True) if len(ids) > max_len else (ids, False)


def _batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped longest first, so each batch pads little."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _left_pad(seqs: Sequence[list[int]], pad_id: int, device: str) -> tuple[torch.Tensor, ...]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    # Positions count real tokens only, so a left-padded row sees the positions it would alone.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def _letter_sequences(lm: LoadedModel, text: str) -> tuple[list[int], list[list[int]], bool]:
    """(prompt ids, prompt + letter ids for each letter, whether one pass at the end suffices)."""
    ctx = lm.encode(text)
    wholes = [lm.encode(f"{text} {letter}") for letter in LETTERS]
    one_pass = all(len(w) == len(ctx) + 1 and w[: len(ctx)] == ctx for w in wholes)
    return ctx, wholes, one_pass


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b) - 1) and a[n] == b[n]:
        n += 1
    return n


def score_logprob(
    lm: LoadedModel, texts: Sequence[str], cfg: ScoringConfig, batch_size: int, progress: Progress
) -> list[Score]:
    max_len = lm.info.max_length
    device = lm.info.device
    encoded: list[tuple[list[int], bool]] = []
    letter_ids: list[list[int]] = []
    multi: dict[int, list[tuple[int, list[int]]]] = {}
    for i, text in enumerate(texts):
        ctx, wholes, one_pass = _letter_sequences(lm, text)
        encoded.append(_fit(ctx, max_len))
        letter_ids.append([w[-1] for w in wholes])
        if not one_pass:
            multi[i] = [(_shared_prefix(ctx, w), w) for w in wholes]
    logprobs: list[tuple[float, float, float, float] | None] = [None] * len(texts)
    single = [i for i in range(len(texts)) if i not in multi]
    with torch.inference_mode():
        for batch in _batches([len(encoded[i][0]) for i in single], batch_size):
            rows = [single[j] for j in batch]
            ids, mask, pos = _left_pad([encoded[i][0] for i in rows], lm.pad_id, device)
            logits = lm.model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1).logits
            lp = torch.log_softmax(logits[:, -1, :].float(), dim=-1)
            for r, i in enumerate(rows):
                vals = lp[r, letter_ids[i]].tolist()
                logprobs[i] = (vals[0], vals[1], vals[2], vals[3])
            progress(len(rows))
        for i, conts in multi.items():
            logprobs[i] = _score_sequences(lm, conts)
            progress(1)
    scores = []
    for i, lps in enumerate(logprobs):
        assert lps is not None
        scores.append(
            Score(
                prediction=int(np.argmax(lps)),
                logprobs=lps,
                n_tokens=len(encoded[i][0]),
                truncated=encoded[i][1],
                multi_pass=i in multi,
            )
        )
    return scores


@torch.inference_mode()
def _score_sequences(
    lm: LoadedModel, conts: list[tuple[int, list[int]]]
) -> tuple[float, float, float, float]:
    """Sum of log P(token | earlier tokens) over each letter sequence's tokens after its kept prefix."""
    seqs = [whole[-lm.info.max_length :] for _, whole in conts]
    ids, mask, pos = _left_pad(seqs, lm.pad_id, lm.info.device)
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
    return (out[0], out[1], out[2], out[3])


def parse_generation(text: str) -> int | None:
    """The answer index from a generation: its first non-whitespace character, if A-D."""
    stripped = text.lstrip()
    if stripped and stripped[0] in LETTERS:
        return LETTERS.index(stripped[0])
    return None


def score_generate(
    lm: LoadedModel, texts: Sequence[str], cfg: ScoringConfig, batch_size: int, progress: Progress
) -> list[Score]:
    from transformers import GenerationConfig

    # Room for the new tokens: the prompt keeps its end if it is too long.
    max_len = lm.info.max_length - cfg.max_new_tokens
    encoded = [_fit(lm.encode(t), max_len) for t in texts]
    gen_cfg = GenerationConfig(  # type: ignore[no-untyped-call]
        max_new_tokens=cfg.max_new_tokens,
        do_sample=False,
        pad_token_id=lm.pad_id,
        eos_token_id=lm.tokenizer.eos_token_id,
    )
    generated: list[str] = [""] * len(texts)
    with torch.inference_mode():
        for batch in _batches([len(ids) for ids, _ in encoded], batch_size):
            ids, mask, _ = _left_pad([encoded[i][0] for i in batch], lm.pad_id, lm.info.device)
            out = lm.model.generate(input_ids=ids, attention_mask=mask, generation_config=gen_cfg)
            for r, i in enumerate(batch):
                generated[i] = lm.decode(out[r, ids.shape[1] :].tolist())
            progress(len(batch))
    return [
        Score(
            prediction=parse_generation(g), generated=g, n_tokens=len(encoded[i][0]), truncated=encoded[i][1]
        )
        for i, g in enumerate(generated)
    ]


SCORERS: dict[str, Callable[[LoadedModel, Sequence[str], ScoringConfig, int, Progress], list[Score]]] = {
    "logprob": score_logprob,
    "generate": score_generate,
}


def calibrated_predictions(logprobs: np.ndarray, method: str) -> np.ndarray:
    """Predictions from an (n, 4) log-prob matrix of one subject.

    `none`: argmax. `mean`: argmax after subtracting each letter's mean log-prob over the
    subject's questions, which removes a model's constant preference for some letters.
    """
    if method == "none":
        return np.asarray(np.argmax(logprobs, axis=1))
    if method == "mean":
        return np.asarray(np.argmax(logprobs - logprobs.mean(axis=0, keepdims=True), axis=1))
    raise ValueError(f"unknown calibration {method!r}")
