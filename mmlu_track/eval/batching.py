"""How prompts become batches (the in-process scorers' shared part; `Score` is the seam's).

Prompts are sorted longest first and cut into batches of at most `batch_size` rows and, with
`max_tokens`, at most that many padded tokens (rows x longest row): short questions travel in
bigger batches. Batches are left-padded with explicit position ids, so each row is computed as if
alone: results do not depend on the batching beyond float rounding. A batch that runs out of
memory is retried with both limits halved (`run_batches`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from mmlu_track.eval.backend import Progress, Score
from mmlu_track.settings.config import EvalConfig, ScoringConfig

__all__ = ["Batching", "Progress", "Score", "fit", "left_pad", "run_batches"]


@dataclass(frozen=True)
class Batching:
    """How the in-process backend scores: the scoring settings, the most prompts per forward pass
    (`batch_size`) and, unless None, the most padded tokens per pass (`batch_tokens`)."""

    scoring: ScoringConfig
    batch_size: int
    batch_tokens: int | None = None

    @classmethod
    def of(cls, cfg: EvalConfig) -> Batching:
        """The batching an evaluation's settings ask for (its scoring, `batch_size`, `batch_tokens`)."""
        return cls(cfg.scoring, cfg.batch_size, cfg.batch_tokens)


def fit(ids: list[int], max_len: int) -> tuple[list[int], bool]:
    """(ids, whether cut): a prompt longer than `max_len` keeps its end."""
    # Context fitting already dropped shots; a 0-shot prompt still too long keeps its end.
    return (ids[-max_len:], True) if len(ids) > max_len else (ids, False)


def left_pad(seqs: Sequence[list[int]], pad_id: int, device: str) -> tuple[torch.Tensor, ...]:
    """(ids, mask, positions), each `[rows, longest]`, the rows' tokens right-aligned."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    # Positions count real tokens only, so a left-padded row sees the positions it would alone.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def run_batches(lengths: Mapping[int, int], batching: Batching, run: Callable[[list[int]], None]) -> int:
    """Call `run` on batches of the items of `lengths` (item -> its tokens), longest first, and
    return the row limit that worked last.

    A batch has at most `batching.batch_size` rows and, with `batching.batch_tokens`, at most that
    many padded tokens (rows x the batch's longest row), so a batch of short questions holds more
    of them. On out-of-memory both limits halve (never below one row) and the batch is retried whole.
    """
    order = sorted(lengths, key=lambda i: -lengths[i])  # stable: equal lengths keep their order
    size, budget, start = batching.batch_size, batching.batch_tokens, 0
    while start < len(order):
        stop = min(len(order), start + size)
        if budget is not None:
            # Longest first: the first row is the widest, so the budget buys this many rows.
            stop = min(stop, start + max(1, budget // max(1, lengths[order[start]])))
        chunk = order[start:stop]
        try:
            run(chunk)
        except (RuntimeError, torch.OutOfMemoryError) as err:
            if not _is_oom(err) or len(chunk) == 1:
                raise
            size = max(1, size // 2)
            budget = None if budget is None else max(1, budget // 2)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            print(f"mmlu_track: out of memory, batch size now {size} rows / {budget} tokens", file=sys.stderr)
            continue
        start += len(chunk)
    return size
